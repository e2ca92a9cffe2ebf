#!/usr/bin/env bash
# Session 15, call 3 (main after call 2): the one-row-tile form's 16-row pages as one box each (decode-tma.ts,
# boxGroupFor: groups of 16 where call 2 measured +1.4–2.1% at K=4 block 16). (A) decode-tma.test.ts and
# decode.test.ts in their shards, memcheck / racecheck / synccheck on the GQA K=8 case (now groups of 16 at block
# 16) — before decode_call; (B) the rule (groups of 16) against groups of 8 at block 16, K=8 and K=4, interleaved.
#   bash .device/on-gpu.sh bash bench/s15/call3.sh "$OUT"   (.device, .kcache and dist carried)
set -u
out=${1:?output folder}
. scripts/gpu-lib.sh
logs=$out/tests cap=220
mkdir -p "$logs"
export NO_COLOR=1 ATTNLAB_CACHE_DIR=/tmp/attnlab-decode-cache
mkdir -p "$ATTNLAB_CACHE_DIR"
[ -f .kcache/kernels.tar.xz ] && tar -C "$ATTNLAB_CACHE_DIR" -xJf .kcache/kernels.tar.xz
date -u; nvidia-smi --query-gpu=name,uuid,power.limit --format=csv,noheader
shard decode-tma-1 - --test-name-pattern=', 1 row group\(s\), ' test/gpu/decode-tma.test.ts
shard decode-tma-2 - --test-name-pattern=', 2 row group\(s\), ' test/gpu/decode-tma.test.ts
shard decode-tma - --test-name-pattern='^(?!.*, [12] row group\(s\), |forced$|flash decode, TMA kernel$|<root>$)' \
  test/gpu/decode-tma.test.ts
shard decode-forced-loaders - --test-name-pattern='^forced (bulk|async) loader' test/gpu/decode.test.ts
shard decode-forced-kernels - --test-name-pattern='^forced (heads|rows) kernel' test/gpu/decode.test.ts
shard decode - --test-name-pattern='^(?!forced |dense and paged 16: |flash decode kernel$|<root>$)' \
  test/gpu/decode.test.ts
for tool in memcheck racecheck synccheck; do
  sanitize "$tool-decode-tma-gqa" "$tool" --test-name-pattern='^GQA 4:1, K=8 .*, [12] row group\(s\), 3 splits' \
    test/gpu/decode-tma.test.ts
done
wait
echo "tests done at ${SECONDS} s"
summary 22 24 20
tar -C "$out" -cJf "$out/tests.tar.xz" tests && rm -rf "$logs"
SMI_MS=100 decode_call "$out"
p16=64:16384:8,128:8192:8,64:16384:4,128:8192:4
for n in 1 2; do
  decode_run "g16-$n" 40 --torch none --impl flash --layouts paged16 --shapes $p16
  decode_run "g8-$n" 40 --torch none --impl flash --layouts paged16 --shapes $p16 --tuning '{"boxGroup":8}'
done
decode_end
tar -C "$ATTNLAB_CACHE_DIR" -cf - $(cd "$ATTNLAB_CACHE_DIR" && ls -d kernels cudnn-plans 2>/dev/null) | xz -T8 -6 \
  > "$out/kernels.tar.xz"
echo "done at ${SECONDS} s"
