#!/usr/bin/env bash
# s8 lead mid call at a3239b7: the forward benches with PyTorch peers (bench/hopper/s6-bench.ts, full), alone on the
# GPU, then the Hopper suite (flash-hopper.test.ts) in shards for the new slack / three-consumer variants.
set -u
out=$OUT; L=/tmp/s8-mid; mkdir -p $L; t0=$SECONDS
export ATTNLAB_CACHE_DIR=/tmp/attnlab-verify-cache NO_COLOR=1 ATTNLAB_COMMIT=$(cat .device/commit)
mkdir -p $ATTNLAB_CACHE_DIR && tar -C $ATTNLAB_CACHE_DIR -xJf .kcache/kernels.tar.xz
timeout --kill-after=5 300 node --import tsx bench/hopper/s6-bench.ts "$L/h200-s8-forward.json" > $L/forward-bench.txt 2>&1
echo "bench rc=$? $((SECONDS-t0))s"
logs=$L; cap=100; source scripts/gpu-lib.sh
shard hopper-h64 - --test-name-pattern='^H=64 ' test/gpu/flash-hopper.test.ts
shard hopper-h128 - --test-name-pattern='^H=128 (?!long)' test/gpu/flash-hopper.test.ts
shard hopper-long - --test-name-pattern='long T' test/gpu/flash-hopper.test.ts
shard hopper-h256 - --test-name-pattern='^H=256 ' test/gpu/flash-hopper.test.ts
shard hopper-rest - --test-name-pattern='^(?!H=(64|128|256) |cuda flash: the Hopper kernel$|<root>$)' test/gpu/flash-hopper.test.ts
wait
echo "tests done $((SECONDS-t0))s"
summary 14 20 20
tar -C $ATTNLAB_CACHE_DIR -cf - kernels cudnn-plans | xz -T8 -6 > $out/kernels.tar.xz
tar -C $L -cf - . | xz -T8 -6 > $out/logs.tar.xz
tail -32 $L/forward-bench.txt
