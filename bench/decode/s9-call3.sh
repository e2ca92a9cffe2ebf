#!/usr/bin/env bash
# Session 9's library call for the TMA decode kernel (decode-tma.ts, flash_decode_ws.cu): the decode GPU
# suites (decode-tma.test.ts; decode.test.ts in four shards: the shared decode_warp.cuh changed under every
# decode kernel), compute-sanitizer memcheck and racecheck of the TMA kernel through the library, then the
# paged/dense K=1 and K=4 library timing (flash, cudnn, auto). From the worktree copy's root, with .device
# (scripts/pack-device.sh) and .kcache carried:
#   cd .wt-decode && bash ../.device/on-gpu.sh bash bench/decode/s9-call3.sh [again]   (logs: $OUT/logs.tar.xz)
# `again` (call C): decode-tma.test.ts alone after call B's one failure (its NaN test's paged calls had no
# keyValueSeqLengths, a test bug), with that test under memcheck and racecheck; ~60 s.
# Expected ~150 s (test caps 150 s, the bench 70 s); a summary table last.
set -u
out=$OUT; L=/tmp/s9-lib; mkdir -p $L; t0=$SECONDS
export ATTNLAB_CACHE_DIR=/tmp/attnlab-verify-cache NO_COLOR=1 ATTNLAB_COMMIT=$(cat COMMIT 2>/dev/null || echo unknown)
mkdir -p $ATTNLAB_CACHE_DIR && tar -C $ATTNLAB_CACHE_DIR -xJf ../.kcache/kernels.tar.xz
logs=$L; cap=150; source scripts/gpu-lib.sh
shard decode-tma - test/gpu/decode-tma.test.ts
if [ "${1:-}" = again ]; then  # call C: decode-tma.test.ts after its NaN test's fix, that test under both sanitizers
  sanitize memcheck-tma-nan memcheck --test-name-pattern='NaN in V and K' test/gpu/decode-tma.test.ts
  sanitize racecheck-tma-nan racecheck --test-name-pattern='NaN in V and K' test/gpu/decode-tma.test.ts
  wait
else
  shard decode-forced-loaders - --test-name-pattern='^forced (bulk|async) loader' test/gpu/decode.test.ts
  shard decode-forced-kernels - --test-name-pattern='^forced (heads|rows) kernel' test/gpu/decode.test.ts
  shard decode-dense - --test-name-pattern='^dense: ' test/gpu/decode.test.ts
  shard decode - --test-name-pattern='^(?!forced |dense and paged 16: |dense: |flash decode kernel$|<root>$)' \
    test/gpu/decode.test.ts
  # The TMA kernel under the sanitizers: ragged lengths incl. 0 and 1 (dense, pages of 16, 64, 256; 3 splits)
  # and the NaN rule (windows, pages of 16 and 64).
  sanitize memcheck-tma memcheck --test-name-pattern='ragged lengths incl. 0 and 1, 3 splits|NaN in V and K' \
    test/gpu/decode-tma.test.ts
  sanitize racecheck-tma racecheck --test-name-pattern='NaN in V and K' test/gpu/decode-tma.test.ts
  wait
  echo "tests done $((SECONDS-t0))s"
  timeout --kill-after=5 70 node --import tsx bench/decode/decode-bench.ts --out $L/decode.json --torch none \
    --impl flash,cudnn,auto --shapes 64:16384:1,64:16384:4 --layouts paged16,paged64,dense --table-room \
    --no-uncached > $L/decode.txt 2>&1
  echo "bench rc=$? $((SECONDS-t0))s"
fi
grep -h "Race reported\|Invalid\|ERROR SUMMARY\|RACECHECK SUMMARY" $L/*.san | sort | uniq -c | head -12
summary 22 18 20
grep -hE '^\s*(not )?ok' $L/decode-tma.tap
[ -f $L/decode.txt ] && cat $L/decode.txt
tar -C $L -cf - . | xz -T8 -6 > $out/logs.tar.xz
echo "total $((SECONDS-t0))s"
