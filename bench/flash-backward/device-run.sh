#!/usr/bin/env bash
# One device call for the fused flash backward (issue 15): its GPU tests, compute-sanitizer memcheck
# and racecheck on the small "sanitize:" runs, and the backward bench beside cudnn and the peers.
# Run from the project root through .device/on-gpu.sh; logs to $OUT, a short table last.
# Usage: bash bench/flash-backward/device-run.sh [steps]   (default: tests memcheck racecheck bench bench64)
set -u
out=${OUT:?}
steps=${*:-tests memcheck racecheck bench bench64}
export ATTNLAB_CACHE_DIR=/tmp/attnlab-cache
summary=()
step() { local name=$1 limit=$2; shift 2; local t0=$SECONDS
  timeout --kill-after=5 "$limit" "$@" > "$out/$name.log" 2>&1; local rc=$?
  summary+=("$(printf '%-10s rc=%-3s %4ss' "$name" "$rc" "$((SECONDS - t0))")"); }
bench() { node --import tsx src/cli/bin.ts bench --pass backward --batch 4 --seq 8192 --heads 16 \
  --dtype bfloat16 --causal false,true --repeats 10 --budget-ms 150 --no-check --ceiling 800 --no-progress "$@"; }
sanitize() { compute-sanitizer --tool "$1" --error-exitcode 9 node --import tsx --test \
  --test-name-pattern="$2" test/gpu/flash-backward.test.ts; }
export -f bench sanitize
for s in $steps; do case $s in
  tests) step tests 80 bash -c 'node --import tsx --test test/gpu/flash-backward.test.ts > "$OUT/tests-flash.log" 2>&1 &
      node --import tsx --test --test-name-pattern=flash test/gpu/backward.test.ts; a=$?; wait $!; b=$?; exit $((a | b))' ;;
  # The same tests in 5 processes at once (each stopped after 30 s), each file run by node itself so
  # that results stream out; their logs are joined into shards.log.
  shards) step shards 40 bash -c 'f=test/gpu/backward.test.ts; i=0
      for pattern in "· flash\$" "(T=300 S=1100|T=S=1000).* · flash long" "^(?!.*(T=300 S=1100|T=S=1000)).* · flash long" \
          "flash deterministic|flash random"; do i=$((i + 1))
        timeout 30 node --import tsx --test-name-pattern="$pattern" $f > /tmp/shard$i.log 2>&1 & done
      timeout 30 node --import tsx test/gpu/flash-backward.test.ts > /tmp/shard0.log 2>&1 & wait
      for g in /tmp/shard?.log; do echo "=== $g"; cat $g; done' ;;
  quick) step quick 60 bash -c 'bench --head-dim 128 --impl flash --name quick' ;;
  bench) step bench 85 bash -c 'bench --head-dim 128 --impl flash,cudnn --peers jax,torch \
      --name h200-flash-backward --json "$OUT/h200-flash-backward.json"' ;;
  bench64) step bench64 40 bash -c 'bench --head-dim 64 --impl flash,cudnn --name h200-flash-backward-h64 --json "$OUT/h200-flash-backward-h64.json"' ;;
  memcheck) step memcheck 30 bash -c 'sanitize memcheck sanitize' ;;
  racecheck) step racecheck 35 bash -c 'sanitize racecheck "sanitize: MHA"' ;;
esac; done
echo "== failures"
grep -hE "^not ok|^ *not ok|Error|ERROR SUMMARY|RACECHECK SUMMARY|Hazard|Race|error:" "$out"/*.log 2>/dev/null | grep -v "# SKIP" | head -30
for f in "$out"/tests*.log; do [ -f "$f" ] && echo "$(basename $f): $(grep -hE "^# (pass|fail)" $f | tr "\n" " ")"; done
[ -f "$out/shards.log" ] && awk '/^=== /{f=$2} /^# (pass|fail|skipped)/{print f": "$0}' "$out/shards.log"
[ -f "$out/shards.log" ] && grep -cE "^ *ok .* · flash|^ *ok " "$out/shards.log"
echo "== bench"; grep -hE "TFLOP|flash|cudnn|torch|jax" "$out"/bench*.log "$out/quick.log" 2>/dev/null | tail -30
printf '%s\n' "${summary[@]}"
