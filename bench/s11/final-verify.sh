#!/usr/bin/env bash
# Session 11's verification call on main: session 9's (bench/s9/final-verify.sh: the whole GPU suite at a
# 200 s cap a shard, with decode-tma.test.ts's new shards and sanitizers; the decode shapes of issue 16
# through the library beside PyTorch's SDPA; `lab --quick`), with K=1 also at B=8 S=128k and B=1 S=32k,
# where row groups replace splits.
#   bash .device/on-gpu.sh bash bench/s11/final-verify.sh "$OUT"   (.device and .kcache carried)
set -u
DECODE_SHAPES=64:16384:8,64:16384:4,64:16384:1,8:131072:1,1:32768:1 DECODE_CAP=150 \
  bash bench/s9/final-verify.sh "${1:?output folder}"
