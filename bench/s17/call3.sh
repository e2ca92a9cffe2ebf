#!/usr/bin/env bash
# Session 17, call 3: bench/decode/read-ceiling.cu again with the chunk orders that say why random 4 KiB pages read
# 13% under pages in order (call 2): shuffled only inside each 2 MiB (the large pages' TLB sees them in order), the
# order KVCache's free list gives 64 sequences growing a token at a time, and plain loads over the same chunks.
#   bash .device/on-gpu.sh bash bench/s17/call3.sh "$OUT"   (.device carried)
set -u
out=${1:?output folder}
export PATH=/usr/local/cuda/bin:$PATH
nvidia-smi --query-gpu=name,uuid,power.limit --format=csv,noheader | tee "$out/gpu.txt"
nvidia-smi --format=csv,noheader -lms 200 --query-gpu=timestamp,power.draw,clocks.sm,clocks_event_reasons.active \
  > "$out/smi.csv" 2>&1 &
smi=$!
timeout -s KILL 120 nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -o /tmp/read-ceiling \
  bench/decode/read-ceiling.cu > "$out/build.log" 2>&1 || echo "read-ceiling build failed"
timeout --kill-after=5 240 /tmp/read-ceiling 256 512 1024 2048 > "$out/read-ceiling.txt" 2>&1
echo "read-ceiling rc=$? at ${SECONDS} s"
kill $smi
grep -A60 '^# reader' "$out/read-ceiling.txt"
