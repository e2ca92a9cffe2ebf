#!/usr/bin/env bash
# Session 18, call 1: the register-direct K=1 decode kernel (bench/decode/flash_decode_regs.cu) in the harness.
# (A) `harness check` over its forms (regs.d2 … d4, Q in shared, the L2::256B hint, an L2 prefetch) against the
# float reference, dense and paged 16 / 64, splits 1 / 3 / 17; (B) K=1 B=64 S=16k (1M tokens) and B=128 S=8k,
# split counts 4 … 32, GB/s a call; the library's TMA kernel (decode-bench, flash) between two harness runs;
# (C) compute-sanitizer memcheck and racecheck over `check quick` (the pair's shared-memory exchange).
#   bash .device/on-gpu.sh bash bench/s18/call1.sh "$OUT"   (.device, dist, .kcache and tmp carried;
#   tmp/harness built here: nvcc -O2 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I src/kernels
#   -DDECODE_SPIN_LIMIT=16777216 -o tmp/harness bench/decode/harness.cu)
set -u
out=${1:?output folder}
. scripts/gpu-lib.sh
decode_harness_call "$out"
decode_harness_check "$out"
export HARNESS_ONLY=regs
export HARNESS_SHAPES=64:16384:1,128:8192:1 HARNESS_SPLITS=4,8,12,16,24,32
timeout -s KILL 150 $bin bench > "$out/h/bench1.txt" 2>&1
echo "bench1 rc=$? at ${SECONDS} s"
SMI_MS=200 decode_call "$out"
decode_run lib-1 90 --torch none --impl flash --shapes 64:16384:1,128:8192:1
HARNESS_SHAPES=64:16384:1 timeout -s KILL 120 $bin bench > "$out/h/bench2.txt" 2>&1
echo "bench2 rc=$? at ${SECONDS} s"
decode_end
decode_harness_sanitize "$out" memcheck racecheck
grep -h "^#" "$out/h/bench1.txt"
grep -h "regs\|tma\|heads" "$out/h/bench1.txt" "$out/h/bench2.txt" | sort -k9 -n -r | head -40
