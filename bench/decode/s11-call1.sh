#!/usr/bin/env bash
# Prepared in session 10 for the next decode call (NOT run): where the TMA decode kernel's K=1 loss sits
# between the loader ceiling (4.3–4.45 TB/s, bench/results/2026-12-01-s10-final) and its own loop with idle
# consumers (3.93): `ceiling` now also times the same copies with 8 warps polling and releasing each stage
# (tma8: does their waiting slow the producer warp?), and the bench times `.lo2` (the kernel's loop with
# neither Q fragments before nor the 8-warp merge and partial rows after) beside `.lo` and the kernel, at
# split counts 1–4 and maps without L2 promotion. Harness only, ~20 s.
#   device: run(carry: [".wt-decode"], command: "cd .wt-decode && bash bench/decode/s11-call1.sh", timeout_s: 120)
set -u
dest=${OUT:-/tmp/out}
HARNESS_L2=none timeout -s KILL 50 ./bench/decode/harness ceiling > "$dest/ceiling.txt" 2>&1
echo "ceiling rc=$?"
HARNESS_ONLY=tma1.4x32.s3f HARNESS_L2=none HARNESS_SPLITS=1,2,3,4 HARNESS_SHAPES=64:16384:1,128:8192:1,8:131072:1 \
  timeout -s KILL 60 ./bench/decode/harness bench > "$dest/bench.txt" 2>&1
echo "bench rc=$?"
grep -E "^(64|128) " "$dest/ceiling.txt"
grep -E "^(64|128|8) " "$dest/bench.txt" | grep -E "tma1.4x32.s3f(.lo|.lo2)? " | awk '{print $1, $2, $4, $5, $7, $9}'
