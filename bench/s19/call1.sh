#!/usr/bin/env bash
# Session 19, call 1. bench/decode/read-ceiling.cu --staged: scattered and ordered 4 KiB pages (512 MiB, 1 GiB) read
# through shared-memory stages filled by producer warps' plain loads into registers (and partly by the TMA engine),
# beside the bulk (TMA) reader and the plain loads alone on the same GPU. Go/no-go for a decode loader of that form.
#   bash bench/s19/call1.sh "$OUT"   (nothing carried: the reader is built on the device)
set -u
out=${1:?output folder}
. scripts/gpu-lib.sh
date -u
nvidia-smi --query-gpu=name,uuid,power.limit,clocks.max.sm --format=csv,noheader
export PATH=/usr/local/cuda/bin:$PATH
read_ceiling_build "$out/read-ceiling.build.log"
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,clocks_throttle_reasons.active --format=csv -lms 200 > "$out/smi.csv" &
smi=$!
timeout -s KILL 120 /tmp/read-ceiling --staged > "$out/staged.txt" 2>&1
echo "staged rc=$? at ${SECONDS} s"
timeout -s KILL 60 /tmp/read-ceiling --staged > "$out/staged-2.txt" 2>&1
echo "staged (again) rc=$? at ${SECONDS} s"
kill $smi
paste <(cut -c1-80 "$out/staged.txt") <(awk '{print $(NF-3)}' "$out/staged-2.txt")
