#!/usr/bin/env bash
# Session 17, call 3. (A) bench/decode/read-ceiling.cu again with the chunk orders that say why random 4 KiB pages
# read 13% under pages in order (call 2): shuffled only inside each 2 MiB (the large pages' TLB sees them in order),
# the order KVCache's free list gives 64 sequences growing a token at a time, and plain loads over the same chunks.
# (B) The library at K=1, 1M tokens, paged 16 / 64, with the block tables in the three orders decode-bench knows
# (shuffled, the default; sequential, a prompt appended at once; interleaved, KVCache's decode loop), interleaved
# twice, flash; the three shapes of the README's K=1 row.
#   bash .device/on-gpu.sh bash bench/s17/call3.sh "$OUT"   (.device, .kcache and dist carried)
set -u
out=${1:?output folder}
. scripts/gpu-lib.sh
decode_call "$out"
nvidia-smi --query-gpu=name,uuid,power.limit --format=csv,noheader
read_ceiling_build "$runs/read-ceiling.build.log"
timeout --kill-after=5 240 /tmp/read-ceiling 256 512 1024 2048 > "$runs/read-ceiling.txt" 2>&1
echo "read-ceiling rc=$? at ${SECONDS} s"
shapes=64:16384:1,8:131072:1,128:8192:1
for n in 1 2; do
  for order in shuffled sequential interleaved; do
    decode_run "$order-$n" 90 --torch none --impl flash --shapes $shapes --layouts paged16,paged64 --table-order $order
  done
done
decode_end
cp "$runs/read-ceiling.txt" "$out/"
grep -A60 '^# reader' "$runs/read-ceiling.txt"
call_save_cache "$out"
