#!/usr/bin/env bash
# Session 5, engineer hopper: one device call (run from the worktree copy through .device/on-gpu.sh).
#   1. The GPU suites with the Hopper kernel as the default: flash, flash-hopper, nan, backward and
#      decode, concurrently, each process with its own ATTNLAB_CACHE_DIR; beside them compute-sanitizer
#      memcheck on flash-hopper.test.ts through the library.
#   2. In the time left before the deadline (seconds since start), `attnlab bench` of flash (wgmma)
#      against attnlab's cudnn and PyTorch, one head dim per invocation (128, 256, 64), GPU alone.
# Usage: bash ../.device/on-gpu.sh bash bench/hopper/s5-session.sh "$OUT" [deadline_s]
set -u
out=${1:?output folder}
deadline=${2:-200}
logs=$out/logs
mkdir -p "$logs" "$out/results"
export ATTNLAB_COMMIT=${ATTNLAB_COMMIT:-unknown}
san=compute-sanitizer
command -v $san > /dev/null || san=/usr/local/cuda/bin/compute-sanitizer
tests=170
for f in flash flash-hopper nan backward decode; do
  (
    ATTNLAB_CACHE_DIR=/tmp/c-$f timeout --kill-after=5 $tests node --import tsx --test --test-reporter=tap \
      test/gpu/$f.test.ts > "$logs/$f.log" 2>&1
    echo "rc=$?" >> "$logs/$f.log"
  ) &
done
(
  ATTNLAB_CACHE_DIR=/tmp/c-san timeout --kill-after=5 $tests $san --tool memcheck --error-exitcode 9 \
    --print-limit 20 node --import tsx --test --test-reporter=tap test/gpu/flash-hopper.test.ts \
    > "$logs/memcheck-flash-hopper.log" 2>&1
  echo "rc=$?" >> "$logs/memcheck-flash-hopper.log"
) &
wait
echo "tests done at ${SECONDS} s"
big=(--batch 4 --seq 8192 --heads 16 --causal false,true --repeats 30 --budget-ms 250 --no-progress --no-check)
for H in 128 256 64; do
  left=$((deadline - SECONDS))
  if [ $left -lt 25 ]; then echo "bench H=$H: skipped, ${left} s left"; continue; fi
  ATTNLAB_CACHE_DIR=/tmp/c-flash timeout --kill-after=3 $left node --import tsx src/cli/bin.ts bench "${big[@]}" \
    --head-dim $H --impl flash,cudnn --peers torch --name s5-hopper-h$H --out "$out/results" \
    > "$logs/bench-h$H.log" 2>&1
  echo "bench H=$H rc=$? at ${SECONDS} s"
done
for f in "$logs"/*.log; do
  echo "$(basename "$f"): $(grep -E '^# (tests|pass|fail|skipped)' "$f" | tr '\n' ' ') $(grep -E 'ERROR SUMMARY' "$f") $(tail -1 "$f")"
done
grep -hE '^\s*not ok' "$logs"/*.log | head -30
for f in "$logs"/bench-*.log; do grep -E 'bf16|torch' "$f" | grep -vE '^\s*│\s*│' | head -12; done
# At most 8 files come back: everything in one archive, the results JSON beside it.
cp "$out"/results/*.json "$out"/ 2> /dev/null
tar -czf "$out/s5-hopper.tgz" -C "$out" logs results && rm -rf "$logs" "$out/results"
ls "$out"
