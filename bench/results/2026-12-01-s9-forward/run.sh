#!/usr/bin/env bash
# s9 lead call 2 (the dynamic persistent grid in the library): the forward benches with PyTorch peers
# (bench/hopper/s6-bench.ts, full) alone on the GPU, then test/gpu/flash-hopper.test.ts in five shards beside
# the sanitizers on the dynamic grid (memcheck, racecheck, synccheck on its D=128 case) and memcheck on the
# three-consumer long-T tile (session 8 ran only racecheck/synccheck there). From a copy of the worktree with
# .device and .kcache one level up:  cd .wt-lead && bash ../.device/on-gpu.sh bash bench/results/2026-12-01-s9-forward/run.sh
# Ran at fe66fdd (README.md), with those four sanitizer runs written out; they are gpu-verify.sh's, now
# called from scripts/gpu-steps.sh. To reproduce the call exactly, check out fe66fdd.
set -u
out=$OUT; L=/tmp/s9-fwd; mkdir -p $L; t0=$SECONDS
export ATTNLAB_CACHE_DIR=/tmp/attnlab-verify-cache NO_COLOR=1 ATTNLAB_COMMIT=${ATTNLAB_COMMIT:-$(cat ../.device/commit)}
mkdir -p $ATTNLAB_CACHE_DIR && tar -C $ATTNLAB_CACHE_DIR -xJf ../.kcache/kernels.tar.xz
timeout --kill-after=5 280 node --import tsx bench/hopper/s6-bench.ts "$L/h200-s9-forward.json" > $L/forward-bench.txt 2>&1
echo "bench rc=$? $((SECONDS-t0))s"
logs=$L; cap=120; source scripts/gpu-lib.sh; source scripts/gpu-steps.sh
shard hopper-h64 - --test-name-pattern='^H=64 ' test/gpu/flash-hopper.test.ts
shard hopper-h128 - --test-name-pattern='^H=128 (?!long)' test/gpu/flash-hopper.test.ts
shard hopper-long - --test-name-pattern='long T' test/gpu/flash-hopper.test.ts
shard hopper-h256 - --test-name-pattern='^H=256 ' test/gpu/flash-hopper.test.ts
shard hopper-rest - --test-name-pattern='^(?!H=(64|128|256) |cuda flash: the Hopper kernel$|<root>$)' test/gpu/flash-hopper.test.ts
hopper_dynamic_sanitizers # gpu-verify.sh's four sanitizer runs (scripts/gpu-steps.sh)
wait
echo "tests done $((SECONDS-t0))s"
summary 14 24 20
tar -C $ATTNLAB_CACHE_DIR -cf - kernels cudnn-plans | xz -T8 -6 > $out/kernels.tar.xz
tar -C $L -cf - . | xz -T8 -6 > $out/logs.tar.xz
tail -34 $L/forward-bench.txt
