#!/usr/bin/env bash
# Session 11's second verification call on main, after the first (final-verify.sh at 7e0fb39) failed two
# decode-tma tests (the test's ragged lengths fell below the heads kernel's 128k tokens; its loop asked for a
# log-sum-exp it did not request) and ran decode.test.ts's third shard and `lab --quick` past their caps on
# cold NVRTC compiles (every decode kernel's combine changed). With that call's kernel cache carried: the
# GPU suite at a 240 s cap a shard, K=1 decode beside PyTorch again, `lab --quick` at 100 s.
#   bash .device/on-gpu.sh bash bench/s11/final-verify2.sh "$OUT"   (.device and .kcache carried)
set -u
DECODE_SHAPES=64:16384:1,8:131072:1 DECODE_CAP=90 VERIFY_CAP=240 LAB_CAP=100 \
  bash bench/s9/final-verify.sh "${1:?output folder}"
