#!/usr/bin/env bash
# The TMA kernel (and its loader alone) at split counts 1–4, K=1, maps without promotion: does one split at
# B=64 (64 blocks, no partial rows, no combine launch) beat the model's 2? (call 6's loader ceiling read
# 4.37 TB/s with 64 blocks.) Harness only, ~15 s.
set -u
export HARNESS_ONLY=tma1.4x32.s3f,tma1.4x32.s3f.lo HARNESS_L2=none HARNESS_SPLITS=1,2,3,4 HARNESS_SHAPES=64:16384:1,128:8192:1,8:131072:1
timeout -s KILL 60 ./bench/decode/harness bench > "$OUT/splits.txt" 2>&1
echo rc=$?
grep -E "^(64|128|8) " "$OUT/splits.txt" | grep -E "tma1.4x32.s3f(.lo)? " | awk '{print $1, $2, $4, $5, $7, $9}'
