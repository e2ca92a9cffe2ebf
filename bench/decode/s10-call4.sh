#!/usr/bin/env bash
# Session 10's library call for the TMA decode kernel after calls 2–3 (bench/results/2026-12-01-s10-decode):
# its tensor maps without L2 promotion (decode-tma.ts) and its splits merged in the kernel
# (flash_decode_ws.cu's fused_combine: no combine launch). First the harness (the GPU to itself): check of
# the fused TMA variants, memcheck and racecheck of them, the bench with the separate and the fused
# combine (HARNESS_FUSE, maps without promotion); then the library: decode-tma.test.ts and decode.test.ts
# (four shards), memcheck and racecheck of the TMA kernel through attention(), and decode-bench.ts beside
# PyTorch's SDPA. From the worktree copy's root, .device and .kcache carried:
#   cd .wt-decode && bash ../.device/on-gpu.sh bash bench/decode/s10-call4.sh   (logs: $OUT/logs.tar.xz)
# Ran at 5a9025e. The fused combine lost (bench/results/2026-12-01-s10-decode §3) and was removed after, with
# HARNESS_FUSE: from later commits the harness steps here time the separate combine twice.
set -u
out=$OUT; L=/tmp/s10-lib; mkdir -p $L /tmp/s10h; t0=$SECONDS
. bench/decode/harness-steps.sh
export HARNESS_ONLY=tma1.4x32.s3f HARNESS_FUSE=1 HARNESS_L2=none
harness_sanitize /tmp/s10h/memcheck.san memcheck 99 60
harness_sanitize /tmp/s10h/racecheck.san racecheck 3 60
timeout -s KILL 60 ./bench/decode/harness check > $L/h-check.log 2>&1
echo "harness check rc=$? $((SECONDS - t0))s: $(tail -1 $L/h-check.log)"
wait
cat /tmp/s10h/*.san > $L/h-sanitizers.log
export HARNESS_SHAPES=64:16384:1,128:8192:1,8:131072:1,1:32768:1,1:8192:1 HARNESS_ONLY=tma1.4x32.s3f,none
for f in 0 1; do
  HARNESS_FUSE=$f timeout -s KILL 40 ./bench/decode/harness bench > $L/h-bench-fuse$f.log 2>&1
  echo "harness bench fuse=$f rc=$? $((SECONDS - t0))s"
done
unset HARNESS_ONLY HARNESS_FUSE HARNESS_L2 HARNESS_SHAPES
export ATTNLAB_CACHE_DIR=/tmp/attnlab-verify-cache NO_COLOR=1 ATTNLAB_COMMIT=$(cat COMMIT 2>/dev/null || echo unknown)
mkdir -p $ATTNLAB_CACHE_DIR && tar -C $ATTNLAB_CACHE_DIR -xJf ../.kcache/kernels.tar.xz
logs=$L; cap=150; source scripts/gpu-lib.sh
shard decode-tma - test/gpu/decode-tma.test.ts
shard decode-forced-loaders - --test-name-pattern='^forced (bulk|async) loader' test/gpu/decode.test.ts
shard decode-forced-kernels - --test-name-pattern='^forced (heads|rows) kernel' test/gpu/decode.test.ts
shard decode-dense - --test-name-pattern='^dense: ' test/gpu/decode.test.ts
shard decode - --test-name-pattern='^(?!forced |dense and paged 16: |dense: |flash decode kernel$|<root>$)' \
  test/gpu/decode.test.ts
sanitize memcheck-tma memcheck --test-name-pattern='ragged lengths incl. 0 and 1, 3 splits|NaN in V and K|merges its splits' \
  test/gpu/decode-tma.test.ts
sanitize racecheck-tma racecheck --test-name-pattern='NaN in V and K|merges its splits' test/gpu/decode-tma.test.ts
wait
echo "tests done $((SECONDS-t0))s"
timeout --kill-after=5 100 node --import tsx bench/decode/decode-bench.ts --out $L/decode.json \
  --torch /opt/torch/.venv/bin/python --impl flash,cudnn,auto --table-room --no-uncached \
  --shapes 64:16384:1,128:8192:1,8:131072:1,1:32768:1,64:16384:4,64:16384:8 > $L/decode.txt 2>&1
echo "bench rc=$? $((SECONDS-t0))s"
tar -C $L -cf - . | xz -T8 -6 > $out/logs.tar.xz
grep -hE "ERROR SUMMARY|RACECHECK SUMMARY|^check:" $L/h-sanitizers.log $L/*.san | sort | uniq -c | head -12
summary 22 18 20
grep -hE '^\s*(not )?ok' $L/decode-tma.tap | head -20
for f in 0 1; do grep -E "^(64|128|8|1) " $L/h-bench-fuse$f.log | grep tma | awk -v f=$f '{print "fuse"f, $1, $2, $4, $5, $7, $9}'; done
grep -E "GB/s|K=" $L/decode.txt | tail -32
echo "total $((SECONDS-t0))s"
