#!/usr/bin/env bash
# Prepared at the end of session 8 (refused: the budget left was below a cold start), NOT run: the decode suites
# after 9c93d9c (a block table already checked is not checked again), then paged K=1 and K=4 through the library
# (flash, cudnn, auto) — K=1 read 2.44 / 2.86 TB/s at blocks 16 / 64 in s8-final with the check on every call.
# From the project root, .device (pack-device.sh) and .kcache carried, ~100-130 s of command:
#   bash .device/on-gpu.sh bash bench/decode/s8-host-check.sh   (logs: $OUT/last.tar.xz)
set -u
out=$OUT; L=/tmp/s8-last; mkdir -p $L; t0=$SECONDS
export ATTNLAB_CACHE_DIR=/tmp/attnlab-verify-cache NO_COLOR=1 ATTNLAB_COMMIT=$(cat .device/commit)
mkdir -p $ATTNLAB_CACHE_DIR && tar -C $ATTNLAB_CACHE_DIR -xJf .kcache/kernels.tar.xz
logs=$L; cap=110; source scripts/gpu-lib.sh
shard decode-forced-loaders - --test-name-pattern='^forced (bulk|async) loader' test/gpu/decode.test.ts
shard decode-forced-kernels - --test-name-pattern='^forced (heads|rows) kernel' test/gpu/decode.test.ts
shard decode - --test-name-pattern='^(?!forced |dense and paged 16: |flash decode kernel$|<root>$)' test/gpu/decode.test.ts
shard cudnn-paged - test/gpu/cudnn-paged.test.ts
wait
echo "tests done $((SECONDS-t0))s"
timeout --kill-after=5 60 node --import tsx bench/decode/decode-bench.ts --out $L/decode-paged.json --torch none \
  --impl flash,cudnn,auto --shapes 64:16384:1,64:16384:4 --layouts paged16,paged64 --table-room --no-uncached > $L/decode-paged.txt 2>&1
echo "bench rc=$? $((SECONDS-t0))s"
summary 22 20 20
cat $L/decode-paged.txt
tar -C $L -cf - . | xz -T8 -6 > $out/last.tar.xz
