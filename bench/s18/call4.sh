#!/usr/bin/env bash
# Session 18, call 4. (A) bench/decode/read-ceiling.cu --hybrid: scattered 4 KiB pages of 512 MiB read by the TMA
# engine and plain loads at once, each a share (calls 1–3: the register-direct kernel's loads alone read ≤ 3.3 TB/s;
# do the two paths add up past either alone?). (B) `lab --quick` through dist. (C) the whole GPU suite and its
# sanitizers (scripts/gpu-verify.sh 280) at this tree: the non-decode shards last ran in session 16, the decode
# ones in session 17's call 5 (with the removed cp.async loader in the tree); since then the TMA kernels' sources are
# byte-identical and the host side changed (decodeTuning checked, session 17's loader removal).
#   bash .device/on-gpu.sh bash bench/s18/call4.sh "$OUT"   (.device, dist, .kcache and tmp carried; tmp/read-ceiling:
#   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -o tmp/read-ceiling bench/decode/read-ceiling.cu)
set -u
out=${1:?output folder}
. scripts/gpu-lib.sh
date -u
nvidia-smi --query-gpu=name,uuid,power.limit --format=csv,noheader
export PATH=/usr/local/cuda/bin:$PATH NO_COLOR=1
reader=tmp/read-ceiling
if ! timeout -s KILL 60 $reader --hybrid > "$out/hybrid.txt" 2>&1; then
  echo "carried reader failed: building"
  read_ceiling_build "$out/read-ceiling.build.log"
  timeout -s KILL 60 /tmp/read-ceiling --hybrid > "$out/hybrid.txt" 2>&1
fi
echo "hybrid rc=$? at ${SECONDS} s"
cat "$out/hybrid.txt"
export ATTNLAB_CACHE_DIR=/tmp/attnlab-verify-cache
mkdir -p "$ATTNLAB_CACHE_DIR"
[ -f .kcache/kernels.tar.xz ] && tar -C "$ATTNLAB_CACHE_DIR" -xJf .kcache/kernels.tar.xz
timeout --kill-after=5 100 node dist/src/cli/bin.js lab --quick --out /tmp/lab > "$out/lab.txt" 2>&1
echo "lab rc=$? at ${SECONDS} s"
tail -5 "$out/lab.txt"
bash scripts/gpu-verify.sh "$out" 280 2>&1 | tail -60
echo "done at ${SECONDS} s"
