#!/usr/bin/env bash
# Session 8's library-path decode call (issue 16): attnlab flash, cudnn and auto (implementation unset)
# through attention(), beside PyTorch's SDPA (cuDNN, flash) in the same run, dense and paged 16/64
# (block tables with one spare column: the fixed-width tables `auto` may run on cuDNN), then the
# auto-dispatch GPU tests of test/gpu/decode.test.ts. Run from the worktree copy through on-gpu.sh:
#   run(carry: [".device", ".kcache", ".wt-decode"],
#       command: "cd .wt-decode && bash ../.device/on-gpu.sh bash bench/decode/s8-call2.sh")
# Caps (SIGKILL, a hung kernel ignores SIGTERM): bench 150 s, tests 45 s. Logs in $OUT as one archive.
set -u
out=${OUT:-/tmp/out}
logs=/tmp/s8-decode && mkdir -p "$logs"
export NO_COLOR=1 ATTNLAB_CACHE_DIR=/tmp/attnlab-decode-cache
export ATTNLAB_COMMIT=${ATTNLAB_COMMIT:-unknown}
mkdir -p "$ATTNLAB_CACHE_DIR"
[ -f ../.kcache/kernels.tar.xz ] && tar -C "$ATTNLAB_CACHE_DIR" -xJf ../.kcache/kernels.tar.xz
t0=$SECONDS
shapes=64:16384:8,8:131072:8,128:8192:8,64:16384:4,64:16384:1,1:2048:8,1:32768:8
timeout -s KILL 150 node --import tsx bench/decode/decode-bench.ts --out "$out/library.json" \
  --torch /opt/torch/.venv/bin/python --impl flash,cudnn,auto --table-room --no-uncached --shapes "$shapes" \
  > "$logs/library.log" 2>&1
echo "bench rc=$? $((SECONDS - t0))s"
timeout -s KILL 45 node --import tsx --test --test-reporter=tap --test-name-pattern='^auto runs' \
  test/gpu/decode.test.ts > "$logs/test-auto.tap" 2>&1
echo "test rc=$? $((SECONDS - t0))s: $(grep -E '^# (pass|fail) ' "$logs/test-auto.tap" | tr '\n' ' ')"
grep -B2 -A14 '^not ok\|^    not ok' "$logs/test-auto.tap" | head -40
tar -C "$logs" -cJf "$out/logs.tar.xz" .
tail -40 "$logs/library.log"
echo "total $((SECONDS - t0))s"
