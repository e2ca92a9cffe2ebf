#!/usr/bin/env bash
# Session 17, call 6: bench/decode/read-ceiling.cu --in-flight — scattered 4 KiB chunks against the bytes a SM keeps
# in flight (the bulk reader's 192 KiB as 3 × 64, 6 × 32, 12 × 16 KiB stages, and 13 × 16; plain loads with 64–256
# KiB), at 512 MiB and 1 GiB: whether finer stages would let a decode kernel read scattered 16-row pages faster.
#   bash .device/on-gpu.sh bash bench/s17/call6.sh "$OUT"   (.device carried)
set -u
out=${1:?output folder}
export PATH=/usr/local/cuda/bin:$PATH
nvidia-smi --query-gpu=name,uuid,power.limit --format=csv,noheader | tee "$out/gpu.txt"
nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -o /tmp/read-ceiling bench/decode/read-ceiling.cu \
  > /tmp/build.log 2>&1 || { echo "build failed"; cat /tmp/build.log; }
timeout --kill-after=5 90 /tmp/read-ceiling --in-flight > "$out/in-flight.txt" 2>&1
echo "rc=$? at ${SECONDS} s"
cat "$out/in-flight.txt"
