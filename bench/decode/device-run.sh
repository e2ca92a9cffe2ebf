#!/usr/bin/env bash
# One device call for the decode kernel (issue 16): its GPU tests, compute-sanitizer memcheck on a
# subset, the bandwidth bench against PyTorch, the split sweep, an ncu profile of one dense and one
# paged launch, and two isolated launches of the (opt-in) bulk loader. Logs to $OUT (8 files: what
# comes back at most), a short table last. Usage, from the project root: bash ../.device/on-gpu.sh bash bench/decode/device-run.sh
set -u
out=${OUT:-/tmp/out}
export ATTNLAB_COMMIT=${ATTNLAB_COMMIT:-unknown}
torch=/opt/torch/.venv/bin/python
summary=()
step() { local name=$1 limit=$2 log=$3; shift 3; local t0=$SECONDS
  timeout --kill-after=5 "$limit" "$@" >> "$out/$log" 2>&1; local rc=$?
  summary+=("$(printf '%-10s rc=%-3s %4ss' "$name" "$rc" "$((SECONDS - t0))")"); }
# Limits by priority, each with room: the first call (2026-12-01, session 5) gave tests 80 s, the
# bench 45 s, the sweep 25 s and came back empty. A whole call needs ~8 minutes with these.
step tests 240 tests.log node --import tsx --test test/gpu/decode.test.ts
step bench 150 bench.log node --import tsx bench/decode/decode-bench.ts --out "$out/decode.json" --torch "$torch"
step sweep 120 bench.log node --import tsx bench/decode/splits-sweep.ts --out "$out/splits.json" \
  --shapes 1x8192,1x131072,8x131072,16x8192,64x16384 --splits 0,1,2,3,4,6,8,16,32
step memcheck 150 sanitize.log compute-sanitizer --tool memcheck --error-exitcode 9 \
  node --import tsx --test --test-name-pattern='paged \(blockSize 16\)|NaN|H=72|forced' test/gpu/decode.test.ts
step ncu 90 ncu.log ncu --clock-control none --kernel-name regex:'^attnlab_flash_decode$' --launch-count 2 \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats \
  node --import tsx bench/decode/splits-sweep.ts --once --out /tmp/ncu.json --shapes 64x16384 --splits 0 \
  --layouts dense,paged16
# The bulk loader (off by default: it stalled on its first run): one tile, then many, each alone.
step bulk1 30 bulk.log node --import tsx bench/decode/splits-sweep.ts --once --out /tmp/b1.json --shapes 1x64 \
  --splits 1 --loaders bulk --layouts dense
step bulk2 30 bulk.log node --import tsx bench/decode/splits-sweep.ts --once --out /tmp/b2.json --shapes 1x4096 \
  --splits 1 --loaders bulk --layouts dense
echo "== tests"; grep -E "^# (tests|pass|fail)|^not ok|not ok .*-" "$out/tests.log" | head -30
echo "== sanitize"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|^# (pass|fail)" "$out/sanitize.log"
echo "== ncu"; grep -E "attnlab_flash_decode|DRAM Throughput|Memory Throughput|Duration|Achieved Occupancy|Registers Per" "$out/ncu.log" | head -40
echo "== bulk"; tail -5 "$out/bulk.log"
echo "== bench and sweep"; tail -60 "$out/bench.log"
printf '%s\n' "${summary[@]}"
