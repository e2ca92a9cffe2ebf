#!/usr/bin/env bash
# Session 21, call 4. The final tree on the GPU: the whole suite (scripts/gpu-verify.sh; the library's bad-input
# fixes touch KVCache's free list, options checks, toFloat64Array and the config reader, and the CLI's checks), then
# the CLI through dist/: `attnlab lab --quick`, a small
# `attnlab bench` with --block-size and the peers, and `attnlab info`.
#   bash .device/on-gpu.sh bash bench/s21/call4.sh "$OUT"   (.device, dist and .kcache carried)
set -u
out=${1:?output folder}
. scripts/gpu-lib.sh
date -u
nvidia-smi --query-gpu=name,uuid,power.limit,clocks.max.sm --format=csv,noheader
mkdir -p "$out/v"
bash scripts/gpu-verify.sh "$out/v" 240 > "$out/verify.txt" 2>&1
echo "verify rc=$? at ${SECONDS} s"
export NO_COLOR=1 ATTNLAB_CACHE_DIR=/tmp/attnlab-verify-cache
timeout -s KILL 120 node bin/attnlab.js lab --quick --out "$out/lab" > "$out/lab.txt" 2>&1
echo "lab --quick rc=$? at ${SECONDS} s"
timeout -s KILL 90 node bin/attnlab.js bench --batch 8 --seq 1 --kv-seq 4096 --heads 32 --kv-heads 8,1 \
  --head-dim 128 --block-size 16 --impl flash,cudnn --peers torch --no-progress --out "$out/bench" --name decode \
  > "$out/bench.txt" 2>&1
echo "bench rc=$? at ${SECONDS} s"
timeout -s KILL 60 node bin/attnlab.js info > "$out/info.txt" 2>&1
echo "info rc=$? at ${SECONDS} s"
tail -62 "$out/verify.txt"
sed -n '/rows$/,/^$/p' "$out/bench.txt" | head -20
