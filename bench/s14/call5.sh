#!/usr/bin/env bash
# Session 14, call 5 (main after call 4): (A) gpu-verify's `rest` shard alone (in call 4, beside 24 shards and 26
# sanitizer runs, its plan-cache test's second process took 72 ms against a 39 ms bound: CPU contention or not),
# and the spin kernel (gpu_spin.cu) under memcheck with only the test that does not time; (B) flash K=4 at B=64 S=16k,
# block 16 and dense: first in a process, and after the K=8 shape in one (call 3: 3806 GB/s a call against 4309
# kernels alone, after K=8), per call and with the host hidden.
#   bash .device/on-gpu.sh bash bench/s14/call5.sh "$OUT"   (.device, .kcache and dist carried)
# As run (call 5) decode_call came first and the bare `wait` below waited for its nvidia-smi logger too: the call
# hung past its 420 s limit after the tests (their logs came back) and the benches never ran. The tests now run
# before decode_call starts the logger.
set -u
out=${1:?output folder}
. scripts/gpu-lib.sh
logs=$out/runs cap=240
mkdir -p "$logs"
export NO_COLOR=1 ATTNLAB_CACHE_DIR=/tmp/attnlab-decode-cache
mkdir -p "$ATTNLAB_CACHE_DIR"
[ -f .kcache/kernels.tar.xz ] && tar -C "$ATTNLAB_CACHE_DIR" -xJf .kcache/kernels.tar.xz
rest=$(ls test/gpu/*.test.ts | grep -vE '/(flash|flash-hopper|nan|backward|decode|decode-tma)\.test\.ts$')
shard rest - $rest
sanitize memcheck-gpu-spin memcheck --test-name-pattern='^spinGpu' test/gpu/hidden-host.test.ts
wait
echo "tests done at ${SECONDS} s"
decode_call "$out"
decode_run k4-first 40 --torch none --impl flash --shapes 64:16384:4 --layouts dense,paged16
decode_run k8-k4 60 --torch none --impl flash --shapes 64:16384:8,64:16384:4 --layouts dense,paged16
decode_end
summary 18 24 30
