#!/usr/bin/env bash
# Session 18, call 5: the library against the bare readers on one GPU. K=1 B=64 S=16k (1M tokens) dense / block 16 /
# block 64 through dist's decode-bench (flash, PyTorch's SDPA beside it on the dense cache), read-ceiling --hybrid
# (scattered 16-row pages: TMA, plain loads, both), and the library again: the ratio of call 4's readers to call 1's
# library rows came from two GPUs.
#   bash .device/on-gpu.sh bash bench/s18/call5.sh "$OUT"   (.device, dist, .kcache and tmp carried; tmp/read-ceiling as
#   in call4.sh)
set -u
out=${1:?output folder}
. scripts/gpu-lib.sh
date -u
nvidia-smi --query-gpu=name,uuid,power.limit --format=csv,noheader
SMI_MS=100 decode_call "$out"
k1=64:16384:1
decode_run lib-1 120 --torch /opt/torch/.venv/bin/python --impl flash --shapes $k1
timeout -s KILL 60 tmp/read-ceiling --hybrid > "$runs/hybrid.txt" 2>&1
echo "hybrid rc=$? at ${SECONDS} s"
decode_run lib-2 60 --torch none --impl flash --shapes $k1
decode_end
cat "$runs/hybrid.txt"
echo "done at ${SECONDS} s"
