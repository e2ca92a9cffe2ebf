#!/usr/bin/env bash
# The Hopper kernel through the library, one device call (run from the worktree copy, through
# .device/on-gpu.sh): the GPU tests that reach it, then `attnlab bench` of flash (wgmma) beside
# attnlab's cudnn and PyTorch in the same run, at the settled settings of scripts/gpu-session.sh.
#   bash ../.device/on-gpu.sh bash bench/hopper/device-session.sh "$OUT" [tests] [bench] [sanitize]
set -u
out=${1:?output folder}; shift
steps=${*:-tests bench}
mkdir -p "$out/results"
export ATTNLAB_CACHE_DIR=/tmp/attnlab-cache ATTNLAB_COMMIT=${ATTNLAB_COMMIT:-unknown}
cli=(node --import tsx src/cli/bin.ts)
big=(--batch 4 --seq 8192 --heads 16 --causal false,true --repeats 30 --budget-ms 250 --no-progress)
summary=()
step() { local name=$1 limit=$2; shift 2; local t0=$SECONDS
  timeout --kill-after=5 "$limit" "$@" > "$out/$name.log" 2>&1; local rc=$?
  summary+=("$(printf '%-12s rc=%-3s %4ss' "$name" "$rc" "$((SECONDS - t0))")"); }
for s in $steps; do case $s in
  tests) step tests 200 node --import tsx --test --test-reporter=tap test/gpu/flash-hopper.test.ts test/gpu/flash.test.ts ;;
  bench) step bench 220 "${cli[@]}" bench "${big[@]}" --head-dim 64,128,256 --impl flash,cudnn --peers torch \
      --name h200-hopper-wgmma --out "$out/results" ;;
  sanitize) step sanitize 120 compute-sanitizer --tool memcheck --error-exitcode 9 node --import tsx --test \
      test/gpu/flash-hopper.test.ts ;;
esac; done
echo "== tests"; grep -E "^# (tests|pass|fail|skipped)|^not ok" "$out/tests.log" 2>/dev/null | head -30
grep -B2 -A25 "^not ok" "$out/tests.log" 2>/dev/null | grep -E "error|expected|actual|message|Error" | head -20
echo "== bench"; grep -E "flash|cudnn|torch|TFLOP|causal" "$out/bench.log" 2>/dev/null | tail -30
printf '%s\n' "${summary[@]}"
