#!/bin/bash
# Session 5's last GPU call (lead): what the helpers could not confirm within their budgets, at once,
# each job on its own kernel cache, with a hard cap so that the call ends inside the device time left.
#   1. flash.test.ts with the Hopper kernel on (ATTNLAB_FLASH_KERNEL=wgmma), sharded by dtype — the
#      condition for HOPPER_BY_DEFAULT = true;
#   2. branch trust-repair-fast (the flat-scan NaN repair): nan tests of naive f32, cudnn bf16, FP8,
#      and the repair's cost at B=4 T=8192 N=16 H=128;
#   3. backward.test.ts's flash runs (the fused flash backward: its gradient suite);
#   4. decode.test.ts on the rewritten decode kernel's default path (row tiles, split model);
#   then, alone on the GPU: the repair's cost and the decode bandwidth bench against PyTorch.
# Run from the copy of the tree: bash ../.device/on-gpu.sh bash bench/results/2026-12-01-s5-final/run.sh <cap s>
cap=${1:-120}
export NO_COLOR=1 ATTNLAB_COMMIT=${ATTNLAB_COMMIT:-unknown}
tap() { # name, "VAR=value ...", test arguments...
  local name=$1 vars=$2; shift 2
  ( env $vars timeout --kill-after=3 "$cap" node --import tsx --test --test-reporter=tap "$@" > "$OUT/$name.tap.txt" 2>&1
    echo "rc=$?" >> "$OUT/$name.tap.txt" ) &
}
tap wgmma-bf16 'ATTNLAB_FLASH_KERNEL=wgmma ATTNLAB_CACHE_DIR=/tmp/c1' --test-name-pattern='· bfloat16$' test/gpu/flash.test.ts
tap wgmma-fp16 'ATTNLAB_FLASH_KERNEL=wgmma ATTNLAB_CACHE_DIR=/tmp/c2' --test-name-pattern='· float16$' test/gpu/flash.test.ts
tap wgmma-misc 'ATTNLAB_FLASH_KERNEL=wgmma ATTNLAB_CACHE_DIR=/tmp/c3' --test-name-pattern='refuses|shared memory|peak device memory' test/gpu/flash.test.ts
tap nan-fast 'ATTNLAB_CACHE_DIR=/tmp/c4' --test-name-pattern='naive float32|cudnn bfloat16|FP8' test/gpu/nan.test.ts
tap backward-flash 'ATTNLAB_CACHE_DIR=/tmp/c5' --test-name-pattern=flash test/gpu/backward.test.ts
tap decode 'ATTNLAB_CACHE_DIR=/tmp/c6' test/gpu/decode.test.ts
wait
echo "tests done at ${SECONDS} s"
ATTNLAB_CACHE_DIR=/tmp/c4 timeout 12 node --import tsx bench/nan/repair-cost.ts big,fp8 > "$OUT/repair-cost.log.txt" 2>&1
ATTNLAB_CACHE_DIR=/tmp/c6 timeout --kill-after=3 75 node --import tsx bench/decode/decode-bench.ts \
  --out "$OUT/decode.json" --torch /opt/torch/.venv/bin/python > "$OUT/decode-bench.log.txt" 2>&1
echo "decode bench rc=$? at ${SECONDS} s"
echo "== summary"
for f in "$OUT"/*.tap.txt; do
  echo "$(basename "$f" .tap.txt): $(grep -E '^# (tests|pass|fail|skipped)' "$f" | tr '\n' ' ') $(tail -1 "$f")"
done
grep -hE '^ *not ok' "$OUT"/*.tap.txt | head -20
grep -E '^(big|fp8) ' "$OUT/repair-cost.log.txt"
tail -14 "$OUT/decode-bench.log.txt"
