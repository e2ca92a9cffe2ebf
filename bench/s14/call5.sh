#!/usr/bin/env bash
# Session 14, call 5 (main after call 4): (A) gpu-verify's `rest` shard alone (in call 4, beside 24 shards and 26
# sanitizer runs, its plan-cache test's second process took 72 ms against a 39 ms bound: CPU contention or not),
# and the spin kernel (gpu_spin.cu) under memcheck with only the test that does not time; (B) flash K=4 at B=64 S=16k,
# block 16 and dense: first in a process, and after the K=8 shape in one (call 3: 3806 GB/s a call against 4309
# kernels alone, after K=8), per call and with the host hidden.
#   bash .device/on-gpu.sh bash bench/s14/call5.sh "$OUT"   (.device, .kcache and dist carried)
set -u
out=${1:?output folder}
. scripts/gpu-lib.sh
decode_call "$out"
logs=$runs cap=240
export ATTNLAB_CACHE_DIR=/tmp/attnlab-decode-cache
rest=$(ls test/gpu/*.test.ts | grep -vE '/(flash|flash-hopper|nan|backward|decode|decode-tma)\.test\.ts$')
shard rest - $rest
sanitize memcheck-gpu-spin memcheck --test-name-pattern='^spinGpu' test/gpu/hidden-host.test.ts
wait
echo "tests done at ${SECONDS} s"
decode_run k4-first 40 --torch none --impl flash --shapes 64:16384:4 --layouts dense,paged16
decode_run k8-k4 60 --torch none --impl flash --shapes 64:16384:8,64:16384:4 --layouts dense,paged16
decode_end
summary 18 24 30
