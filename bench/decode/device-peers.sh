#!/usr/bin/env bash
# A short device call (~50 s) beside device-run.sh: PyTorch's SDPA on decode-bench.ts's dense shapes and
# the decode kernels alone (bench/decode/harness, built beforehand, every variant at the model's split
# count) in the same run, for same-run ratios; then the library path at B=1 S=2k paged16 with the
# device copies of table and lengths kept and dropped (int32-cache.ts), and one named GPU test. Logs in $OUT.
#   bash ../.device/on-gpu.sh bash bench/decode/device-peers.sh ['test name pattern']
set -u
out=${OUT:-/tmp/out}
export NO_COLOR=1 ATTNLAB_CACHE_DIR=/tmp/attnlab-decode-cache
cases='[{"B":64,"S":16384,"K":8},{"B":8,"S":131072,"K":8},{"B":128,"S":8192,"K":8},{"B":64,"S":16384,"K":4},'
cases+='{"B":64,"S":16384,"K":1},{"B":1,"S":2048,"K":8},{"B":1,"S":8192,"K":8},{"B":1,"S":32768,"K":8}]'
t0=$SECONDS
timeout -s KILL 28 /opt/torch/.venv/bin/python bench/decode/torch_decode.py \
  "{\"cases\": $(echo "$cases" | sed 's/}/,"N":32,"H":128}/g'), \"repeats\": 30}" > "$out/torch.json" 2> "$out/torch.err"
echo "torch rc=$? $((SECONDS - t0))s"
timeout -s KILL 10 ./bench/decode/harness bench > "$out/harness-bench.log" 2>&1; echo "harness rc=$? $((SECONDS - t0))s"
timeout -s KILL 14 node --import tsx bench/decode/decode-bench.ts --out "$out/b1.json" --torch none \
  --shapes 1:2048:8 --layouts paged16 > "$out/b1.log" 2>&1; echo "b1 rc=$? $((SECONDS - t0))s"
if [ -n "${1:-}" ]; then
  timeout -s KILL 14 node --import tsx --test --test-reporter=tap --test-name-pattern="$1" test/gpu/decode.test.ts \
    > "$out/test.tap" 2>&1; echo "test rc=$? $((SECONDS - t0))s"
  grep -E "^# (pass|fail)" "$out/test.tap"; grep -A12 "not ok" "$out/test.tap" | head -30
fi
cat "$out/b1.log" | tail -4
