#!/usr/bin/env bash
# One device call for the fused flash backward (issue 15): its GPU tests, compute-sanitizer memcheck
# and racecheck on the small "sanitize:" runs, and the backward bench beside cudnn and the peers.
# Run from the project root through .device/on-gpu.sh; logs to $OUT, a short table last.
# Usage: bash bench/flash-backward/device-run.sh [steps]   (default: tests bench memcheck racecheck)
set -u
out=${OUT:?}
steps=${*:-tests bench memcheck racecheck}
export ATTNLAB_CACHE_DIR=/tmp/attnlab-cache
summary=()
step() { local name=$1 limit=$2; shift 2; local t0=$SECONDS
  timeout --kill-after=5 "$limit" "$@" > "$out/$name.log" 2>&1; local rc=$?
  summary+=("$(printf '%-10s rc=%-3s %4ss' "$name" "$rc" "$((SECONDS - t0))")"); }
bench() { node --import tsx src/cli/bin.ts bench --pass backward --batch 4 --seq 8192 --heads 16 \
  --dtype bfloat16 --causal false,true --repeats 10 --budget-ms 150 --no-check --ceiling 800 --no-progress "$@"; }
sanitize() { compute-sanitizer --tool "$1" --error-exitcode 9 node --import tsx --test \
  --test-name-pattern=sanitize test/gpu/flash-backward.test.ts; }
export -f bench sanitize
for s in $steps; do case $s in
  tests) step tests 150 bash -c 'node --import tsx --test test/gpu/flash-backward.test.ts &&
      node --import tsx --test --test-name-pattern=flash test/gpu/backward.test.ts' ;;
  quick) step quick 60 bash -c 'bench --head-dim 128 --impl flash --name quick --out "$OUT"' ;;
  bench) step bench 170 bash -c 'bench --head-dim 128,64 --impl flash,cudnn --peers jax,torch \
      --name h200-flash-backward --out "$OUT"' ;;
  memcheck) step memcheck 60 bash -c 'sanitize memcheck' ;;
  racecheck) step racecheck 90 bash -c 'sanitize racecheck' ;;
esac; done
echo "== failures"
grep -hE "^not ok|^ *not ok|Error|ERROR SUMMARY|RACECHECK SUMMARY|Hazard|Race" "$out"/*.log 2>/dev/null | head -30
grep -hE "^# (tests|pass|fail|skipped)|^ℹ (tests|pass|fail|skipped)" "$out/tests.log" 2>/dev/null
echo "== bench"; grep -E "TFLOP|flash|cudnn|torch|jax" "$out/bench.log" "$out/quick.log" 2>/dev/null | tail -30
printf '%s\n' "${summary[@]}"
