#!/usr/bin/env bash
# Session 14, call 3 (bench only, dist/ carried): (A) the TMA kernel without its own combine compiled in (main:
# DECODE_WS_FUSED = 0 unless the launch merges in the kernel) against the kernel as sessions 13's calls 3–4 and
# this session's calls 1–2 ran it (the own combine always compiled in: flash_decode_ws.cu with its `#if
# DECODE_WS_FUSED` made `#if 1`, through ATTNLAB_KERNELS_DIR), interleaved, two processes each; (B) issue 16's rows
# at 1M tokens beside PyTorch with flash, cuDNN and auto (the library's defaults: dependent launches for split
# calls under 1 GiB); (C) B=1 short caches beside PyTorch; (D) `lab --quick`.
#   bash .device/on-gpu.sh bash bench/s14/call3.sh "$OUT"   (.device, .kcache and dist carried)
set -u
. scripts/gpu-lib.sh
decode_call "${1:?output folder}"
py=/opt/torch/.venv/bin/python
prev=/tmp/kernels-prev
cp -r src/kernels $prev
sed -i 's/^#if DECODE_WS_FUSED$/#if 1/' $prev/decode/flash_decode_ws.cu
grep -c '^#if 1$' $prev/decode/flash_decode_ws.cu
ab=64:16384:1,64:65536:1,64:16384:8
for n in 1 2; do
  decode_run "main-$n" 60 --torch none --impl flash --no-kernels-alone --shapes $ab
  ATTNLAB_KERNELS_DIR=$prev decode_run "prev-$n" 60 --torch none --impl flash --no-kernels-alone --shapes $ab
done
decode_run peers 150 --torch $py --impl flash,cudnn,auto --table-room --shapes 64:16384:8,64:16384:4,64:16384:1
decode_run short 90 --torch $py --impl flash,auto --shapes 1:2048:1,1:8192:1,1:32768:1,1:32768:8
timeout --kill-after=5 120 node dist/src/cli/bin.js lab --quick --out "$runs/lab" > "$runs/lab.txt" 2>&1
echo "lab rc=$? at ${SECONDS} s"
rm -f "$runs"/lab/*.html
decode_end
tail -5 "$runs/lab.txt"
