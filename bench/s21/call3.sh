#!/usr/bin/env bash
# Session 21, call 3. Call 2 found that a static split's CTAs end over ~25 µs and that a balanced reader of scattered
# 4 KiB pages reads 1.6–3.2% more; the block scheduler balances a grid of many small blocks (the 8-a-SM static reader:
# +1.8%). Does the library's K=1 call at 1M tokens gain from more splits (more, shorter blocks; the combine merges)?
# K=1 B=64 S=16k dense / block 16 / block 64 through dist's decode-bench: the rule (one split, clustered row groups),
# then splits forced to 2, 4, 8, 16 in the same form, the rule again.
#   bash .device/on-gpu.sh bash bench/s21/call3.sh "$OUT"   (.device, dist and .kcache carried)
set -u
out=${1:?output folder}
. scripts/gpu-lib.sh
date -u
nvidia-smi --query-gpu=name,uuid,power.limit,clocks.max.sm --format=csv,noheader
SMI_MS=100 decode_call "$out"
k1=64:16384:1
decode_run rule-1 70 --torch none --impl flash --shapes $k1
for n in 2 4 8 16; do
  decode_run splits$n 70 --torch none --impl flash --shapes $k1 --tuning "{\"splits\":$n}"
done
decode_run rule-2 70 --torch none --impl flash --shapes $k1
decode_end
echo "done at ${SECONDS} s"
