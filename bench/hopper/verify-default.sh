#!/usr/bin/env bash
# What is left before HOPPER_BY_DEFAULT = true (hopper-variant.ts), in one device call (~250–300 s):
# test/gpu/flash.test.ts with the Hopper kernel on, alone on its cache (it took 186 s beside other
# jobs in session 5 and did not finish in 170 s), with flash-hopper under racecheck and synccheck
# beside it (memcheck was clean in session 5). Run from the worktree copy through .device/on-gpu.sh:
#   bash ../.device/on-gpu.sh bash bench/hopper/verify-default.sh "$OUT"
set -u
out=${1:?output folder}
san=compute-sanitizer
command -v $san > /dev/null || san=/usr/local/cuda/bin/compute-sanitizer
(
  ATTNLAB_FLASH_KERNEL=wgmma ATTNLAB_CACHE_DIR=/tmp/c-flash timeout --kill-after=5 400 node --import tsx --test \
    --test-reporter=tap test/gpu/flash.test.ts > "$out/flash-wgmma.log" 2>&1
  echo "rc=$?" >> "$out/flash-wgmma.log"
) &
for tool in racecheck synccheck; do
  (
    # The bf16 H=128 cases: one variant per tool keeps the sanitizer's slowdown inside the limit.
    ATTNLAB_FLASH_KERNEL=wgmma ATTNLAB_CACHE_DIR=/tmp/c-$tool timeout --kill-after=5 400 $san --tool $tool \
      --error-exitcode 9 --print-limit 20 node --import tsx --test --test-reporter=tap \
      --test-name-pattern='^H=128 .*\(bfloat16\)$' test/gpu/flash-hopper.test.ts > "$out/$tool-flash-hopper.log" 2>&1
    echo "rc=$?" >> "$out/$tool-flash-hopper.log"
  ) &
done
wait
for f in "$out"/*.log; do
  echo "$(basename "$f"): $(grep -E '^# (tests|pass|fail|skipped)' "$f" | tr '\n' ' ') $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$f" | tr '\n' ' ') $(tail -1 "$f")"
done
grep -hE '^\s*not ok' "$out"/*.log | head -30
