#!/usr/bin/env bash
# Session 17, call 2. (A) bench/decode/read-ceiling.cu: what reading alone reaches by the bytes of one call (128 MiB
# … 4 GiB), plain loads and TMA bulk copies of 4 / 16 / 64 KiB in order and at random, 128 and 132 CTAs: the
# ceiling under K=1's 1M-token rows (512 MiB). (B) bench/decode/fixed-cost.ts at K=1 B=64 S=16k, the kernels alone
# at lengths 0…16k: the library's fixed µs a call and marginal rate per layout (clustered row groups since session
# 16), beside the readers' in the same call.
#   bash .device/on-gpu.sh bash bench/s17/call2.sh "$OUT"   (.device, .kcache and dist carried)
set -u
out=${1:?output folder}
. scripts/gpu-lib.sh
decode_call "$out"
nvidia-smi --query-gpu=name,uuid,power.limit --format=csv,noheader
read_ceiling_build "$runs/read-ceiling.build.log"
timeout --kill-after=5 200 /tmp/read-ceiling > "$runs/read-ceiling.txt" 2>&1
echo "read-ceiling rc=$? at ${SECONDS} s"
timeout --kill-after=5 150 node dist/bench/decode/fixed-cost.js --out "$runs/fixed.json" --shape 64:16384:1 > "$runs/fixed.log" 2>&1
echo "fixed rc=$? at ${SECONDS} s"
decode_end
cp "$runs/read-ceiling.txt" "$runs/fixed.log" "$out/"
grep -A40 '^# reader' "$runs/read-ceiling.txt"
grep -h "fixed\|L=" "$runs/fixed.log"
