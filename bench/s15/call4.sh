#!/usr/bin/env bash
# Session 15, call 4 (bench only): the measured decode table's block-16 rows at K=8 and 4 again, now that the
# one-tile form reads a 16-row page as one box (call 2 read them with groups of 8): flash and cuDNN, tables with room.
#   bash .device/on-gpu.sh bash bench/s15/call4.sh "$OUT"   (.device, .kcache and dist carried)
set -u
. scripts/gpu-lib.sh
date -u; nvidia-smi --query-gpu=name,uuid,power.limit --format=csv,noheader
SMI_MS=100 decode_call "${1:?output folder}"
decode_run table16 120 --torch none --impl flash,cudnn --table-room --layouts paged16 \
  --shapes 64:16384:8,8:131072:8,128:8192:8,64:16384:4,8:131072:4,128:8192:4
decode_end
