#!/usr/bin/env bash
# Session 20, call 6. `attnlab bench --block-size` on the GPU through dist/: K=1 decode steps at 1M cached tokens on
# paged caches of 16 and 64 rows (flash and cudnn), PyTorch on the dense cache in the same run; and the GPU test that
# runs bench/measure.ts (test/gpu/gpu-power.test.ts), which the paged inputs changed.
#   bash bench/s20/call6.sh "$OUT"   (.device, dist and .kcache carried)
set -u
out=${1:?output folder}
. scripts/gpu-lib.sh
date -u
nvidia-smi --query-gpu=name,uuid,power.limit,clocks.max.sm --format=csv,noheader
export ATTNLAB_CACHE_DIR=/tmp/attnlab-verify-cache NO_COLOR=1
mkdir -p "$ATTNLAB_CACHE_DIR"
[ -f .kcache/kernels.tar.xz ] && tar -C "$ATTNLAB_CACHE_DIR" -xJf .kcache/kernels.tar.xz
timeout -s KILL 150 node bin/attnlab.js bench --batch 64 --seq 1 --kv-seq 16384 --heads 32 --kv-heads 1 \
  --head-dim 128 --block-size 16,64 --impl flash,cudnn --peers torch --no-progress --out "$out/bench" --name paged \
  > "$out/bench.txt" 2>&1
echo "bench rc=$? at ${SECONDS} s"
timeout -s KILL 60 node --import tsx --test test/gpu/gpu-power.test.ts > "$out/gpu-power.tap" 2>&1
echo "gpu-power rc=$? at ${SECONDS} s"
grep -E "^# (pass|fail)" "$out/gpu-power.tap"
sed -n '/rows$/,/^$/p' "$out/bench.txt" | head -40
