#!/usr/bin/env bash
# Session 13, call 2 (bench only, dist/ carried, with ROW_GROUP_MAX_KEYS): (A) the TMA kernel's two forms
# forced at K=1 B=64 S=32k/48k/64k, dense and block 64 (call 1: row groups read 4455 GB/s at S=32k and 3970
# at S=64k); (B) the library's default at 1M, 2M and 4M cached tokens, K=8/4/1, beside PyTorch; nvidia-smi
# logging as in call 1.
#   bash .device/on-gpu.sh bash bench/s13/call2.sh "$OUT"   (.device, .kcache and dist carried)
set -u
. scripts/gpu-lib.sh
decode_call "${1:?output folder}"
py=/opt/torch/.venv/bin/python
long=64:32768:1,64:49152:1,64:65536:1
decode_run rg2 60 --torch none --impl flash --layouts dense,paged64 --no-kernels-alone --tuning '{"rowGroups":2}' --shapes $long
decode_run rg1 60 --torch none --impl flash --layouts dense,paged64 --no-kernels-alone --tuning '{"rowGroups":1}' --shapes $long
decode_run tokens 260 --torch $py --impl flash,cudnn --no-kernels-alone --table-room \
  --shapes 64:16384:8,64:16384:4,64:16384:1,64:32768:1,64:65536:8,64:65536:4,64:65536:1
decode_end
