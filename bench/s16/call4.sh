#!/usr/bin/env bash
# Session 16, call 4 (main with clustered row groups by default on paged caches, NVML windows over its refreshes):
# (A) K=1 at 1M tokens (B=64 S=16k, B=8 S=128k, B=128 S=8k; dense, blocks 16 and 64), flash and cuDNN beside
# PyTorch in one run; (B) B=64 S=64k K=1 paged, the rule (one block, two splits: 64k keys a block in row groups is
# past ROW_GROUP_MAX_KEYS) against forced clustered row groups, interleaved; (C) `lab --quick`; then (D) the whole
# GPU suite and its sanitizers (scripts/gpu-verify.sh 240) at this tree.
#   bash .device/on-gpu.sh bash bench/s16/call4.sh "$OUT"   (.device, .kcache and dist carried)
set -u
out=${1:?output folder}
. scripts/gpu-lib.sh
date -u; nvidia-smi --query-gpu=name,uuid,power.limit --format=csv,noheader
SMI_MS=100 decode_call "$out"
py=/opt/torch/.venv/bin/python
decode_run table 150 --torch $py --impl flash,cudnn --shapes 64:16384:1,8:131072:1,128:8192:1
long=64:65536:1
decode_run long-rule-1 40 --torch none --impl flash --layouts paged16,paged64 --shapes $long
decode_run long-mc-1 40 --torch none --impl flash --layouts paged16,paged64 --shapes $long --tuning '{"rowGroups":2}'
decode_run long-rule-2 40 --torch none --impl flash --layouts paged16,paged64 --shapes $long
decode_run long-mc-2 40 --torch none --impl flash --layouts paged16,paged64 --shapes $long --tuning '{"rowGroups":2}'
timeout --kill-after=5 90 node dist/src/cli/bin.js lab --quick --out "$runs/lab" > "$runs/lab.txt" 2>&1
echo "lab rc=$? at ${SECONDS} s"
rm -f "$runs"/lab/*.html
decode_end
tail -4 "$runs/lab.txt"
bash scripts/gpu-verify.sh "$out" 240 2>&1 | tail -60
echo "done at ${SECONDS} s"
