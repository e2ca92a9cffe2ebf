#!/usr/bin/env bash
# Session 21, call 2. Is the K=1 paged goal's gap the tail of a static split? (A) bench/decode/read-ceiling.cu
# --dynamic: the bulk (TMA) reader with its stages handed out statically (as the decode kernel's grid does) or
# claimed from a counter, 4 and 16 KiB chunks in order and random, 512 MiB to 2 GiB, with every CTA's start and end
# at 512 MiB; (B) the library on the same GPU, K=1 B=64 S=16k dense / block 16 / block 64 through dist's decode-bench.
#   bash .device/on-gpu.sh bash bench/s21/call2.sh "$OUT"   (.device, dist and .kcache carried)
set -u
out=${1:?output folder}
. scripts/gpu-lib.sh
date -u
nvidia-smi --query-gpu=name,uuid,power.limit,clocks.max.sm --format=csv,noheader
export PATH=/usr/local/cuda/bin:$PATH
read_ceiling_build "$out/read-ceiling.build.log"
timeout -s KILL 120 /tmp/read-ceiling --dynamic > "$out/dynamic.txt" 2>&1
echo "dynamic rc=$? at ${SECONDS} s"
SMI_MS=100 decode_call "$out"
decode_run rule 90 --torch none --impl flash --shapes 64:16384:1
decode_end
echo "done at ${SECONDS} s"
grep "tail\|GB/s   " "$out/dynamic.txt" | cut -c1-150
