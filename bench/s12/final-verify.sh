#!/usr/bin/env bash
# Session 12's verification call on main: the whole GPU suite (scripts/gpu-verify.sh, 240 s a shard, with the
# kernel cache of call 3 carried), then alone on the GPU decode beside PyTorch at K=8 and K=1 (B=64 S=16k) and
# B=1 K=1 at S=2k and 32k (flash, cudnn and auto; per call and kernels alone), then `lab --quick`.
#   bash .device/on-gpu.sh bash bench/s12/final-verify.sh "$OUT"   (.device and .kcache carried)
set -u
DECODE_SHAPES=64:16384:8,64:16384:1,1:2048:1,1:32768:1 DECODE_CAP=150 VERIFY_CAP=240 LAB_CAP=100 \
  bash bench/s9/final-verify.sh "${1:?output folder}"
