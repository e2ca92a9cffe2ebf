#!/bin/bash
# Verifies branch trust-repair-fast on the H200 in ~35 s (warm machine): the NaN GPU tests of the
# backends the repair serves (naive float32 for the 4-lane path, cudnn bfloat16, the FP8 step) and
# the repair's cost at B=4, T=8192, N=16, H=128 (bench/nan/repair-cost.ts big,fp8).
# Run from the worktree copy: bash ../.device/on-gpu.sh bash bench/nan/verify-fast-repair.sh
out=${OUT:-/tmp/verify-fast}
mkdir -p "$out"
export ATTNLAB_CACHE_DIR=/tmp/attnlab-cache NO_COLOR=1
timeout 25 node --import tsx --test --test-reporter=tap \
  --test-name-pattern="naive float32|cudnn bfloat16|FP8" test/gpu/nan.test.ts > "$out/nan-tests.tap.txt" 2>&1
echo "nan-tests rc=$? $(grep -E '^# (pass|fail|skipped)' "$out/nan-tests.tap.txt" | tr '\n' ' ')"
grep -E '^ *not ok' "$out/nan-tests.tap.txt" | head
timeout 8 node --import tsx bench/nan/repair-cost.ts big,fp8 > "$out/repair-cost.log.txt" 2>&1
echo "repair-cost rc=$?"
grep -E '^(big|fp8) ' "$out/repair-cost.log.txt"
