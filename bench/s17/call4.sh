#!/usr/bin/env bash
# Session 17, call 4 (this session's library: the L2 prefetch removed): (A) bench/decode/read-ceiling.cu with the
# load/store-path reader (lsu: 16-byte cp.async into the same three 64 KiB stages a CTA, 4 or 8 warps) beside the
# TMA bulk reader and plain loads, every chunk order; (B) the whole GPU suite and its sanitizers
# (scripts/gpu-verify.sh 300); (C) `lab --quick` with the suite's warm kernel cache.
#   bash .device/on-gpu.sh bash bench/s17/call4.sh "$OUT"   (.device, .kcache and dist carried)
set -u
out=${1:?output folder}
. scripts/gpu-lib.sh
export PATH=/usr/local/cuda/bin:$PATH
date -u; nvidia-smi --query-gpu=name,uuid,power.limit --format=csv,noheader | tee "$out/gpu.txt"
timeout -s KILL 120 nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -o /tmp/read-ceiling \
  bench/decode/read-ceiling.cu > /tmp/read-ceiling.build.log 2>&1 || { echo "read-ceiling build failed"; cat /tmp/read-ceiling.build.log; }
timeout --kill-after=5 120 /tmp/read-ceiling 256 512 1024 2048 > "$out/read-ceiling.txt" 2>&1
echo "read-ceiling rc=$? at ${SECONDS} s"
bash scripts/gpu-verify.sh "$out" 300 > "$out/verify-summary.txt" 2>&1
echo "verify done at ${SECONDS} s"
export NO_COLOR=1 ATTNLAB_CACHE_DIR=/tmp/attnlab-verify-cache
export ATTNLAB_COMMIT=${ATTNLAB_COMMIT:-$(cat .device/commit 2>/dev/null || echo unknown)}
mkdir -p /tmp/lab
timeout --kill-after=5 120 node dist/src/cli/bin.js lab --quick --out /tmp/lab > "$out/lab.txt" 2>&1
echo "lab rc=$? at ${SECONDS} s"
cp "$(ls /tmp/lab/*.json | head -1)" "$out/lab.json" 2>/dev/null
grep -A80 '^# reader' "$out/read-ceiling.txt" | grep -E '^#|512|lsu|ldg 4K|bulk 4K'
tail -3 "$out/lab.txt"
sed -n '/== summary/,$p' "$out/verify-summary.txt"
