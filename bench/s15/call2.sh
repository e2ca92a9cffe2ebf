#!/usr/bin/env bash
# Session 15, call 2 (main after call 1: the one-row-tile form by default): (A) the measured decode table's rows at
# K=8 and K=4 (B=64 S=16k, B=8 S=128k, B=128 S=8k; dense, blocks 16 and 64) with flash and cuDNN beside PyTorch,
# block tables with room (--table-room: the tables src/backends/decode-dispatch-table.ts speaks for); (B) boxes at
# K=4 block 16 (the one-block form's groups of 8 against half boxes and groups of 16, decodeTuning.boxGroup),
# interleaved; (C) K=1 at B=64 S=16k with the clocks beside it (is MQA's 4.0–4.1 TB/s power-capped too?);
# (D) `lab --quick`; then (E) the whole GPU suite and its sanitizers (scripts/gpu-verify.sh) at this tree.
#   bash .device/on-gpu.sh bash bench/s15/call2.sh "$OUT"   (.device, .kcache and dist carried)
set -u
out=${1:?output folder}
. scripts/gpu-lib.sh
date -u; nvidia-smi --query-gpu=name,uuid,power.limit --format=csv,noheader
SMI_MS=100 decode_call "$out"
py=/opt/torch/.venv/bin/python
decode_run table 200 --torch $py --impl flash,cudnn --table-room \
  --shapes 64:16384:8,8:131072:8,128:8192:8,64:16384:4,8:131072:4,128:8192:4
k4=64:16384:4,128:8192:4
decode_run box8-1 30 --torch none --impl flash --layouts paged16 --shapes $k4
decode_run box0 30 --torch none --impl flash --layouts paged16 --shapes $k4 --tuning '{"boxGroup":0}'
decode_run box16 30 --torch none --impl flash --layouts paged16 --shapes $k4 --tuning '{"boxGroup":16}'
decode_run box8-2 30 --torch none --impl flash --layouts paged16 --shapes $k4
decode_run k1 40 --torch none --impl flash --shapes 64:16384:1
timeout --kill-after=5 90 node dist/src/cli/bin.js lab --quick --out "$runs/lab" > "$runs/lab.txt" 2>&1
echo "lab rc=$? at ${SECONDS} s"
rm -f "$runs"/lab/*.html
decode_end
tail -4 "$runs/lab.txt"
bash scripts/gpu-verify.sh "$out" 240 2>&1 | tail -60
echo "done at ${SECONDS} s"
