#!/usr/bin/env bash
# Session 16, call 5 (the tree of call 4): the two shards of scripts/gpu-verify.sh cut at their 240 s cap in call 4
# (`decode`: decode.test.ts but its forced kernels and loaders; `decode-tma`: decode-tma.test.ts but its three forms'
# forced cases — the measured defaults, fp16, NaN, fused merges, the decode loop), alone and with call 4's whole
# kernel cache, then `lab --quick` (killed at call 4's 90 s cap while it compiled cold).
#   bash .device/on-gpu.sh bash bench/s16/call5.sh "$OUT"   (.device, .kcache and dist carried)
set -u
out=${1:?output folder}
. scripts/gpu-lib.sh
logs=$out/tests cap=300
mkdir -p "$logs"
export NO_COLOR=1 ATTNLAB_CACHE_DIR=/tmp/attnlab-verify-cache
mkdir -p "$ATTNLAB_CACHE_DIR"
[ -f .kcache/kernels.tar.xz ] && tar -C "$ATTNLAB_CACHE_DIR" -xJf .kcache/kernels.tar.xz
date -u; nvidia-smi --query-gpu=name,uuid,power.limit --format=csv,noheader
shard decode - --test-name-pattern='^(?!forced |dense and paged 16: |flash decode kernel$|<root>$)' \
  test/gpu/decode.test.ts
shard decode-tma - \
  --test-name-pattern='^(?!.*(, [12] row group\(s\), |, clustered row groups, )|forced$|flash decode, TMA kernel$|<root>$)' \
  test/gpu/decode-tma.test.ts
shard gpu-power - test/gpu/gpu-power.test.ts
wait
echo "tests done at ${SECONDS} s"
timeout --kill-after=5 200 node dist/src/cli/bin.js lab --quick --out "$logs/lab" > "$logs/lab.txt" 2>&1
echo "lab rc=$? at ${SECONDS} s"
rm -f "$logs"/lab/*.html
summary 12 12 20
tail -4 "$logs/lab.txt"
tar -C "$out" -cJf "$out/tests.tar.xz" tests
echo "done at ${SECONDS} s"
