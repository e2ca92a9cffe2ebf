#!/usr/bin/env bash
# Session 13, call 5: the TMA kernel's forced-form shards (decode-tma-1 and -2 of scripts/gpu-verify.sh: two forms
# × 6 cache layouts × 4 split counts × 4 cases) at main's last library change, where 3 splits go through the
# combine kernel again (call 3 ran them with the kernel's own combine at 3 splits).
#   bash .device/on-gpu.sh bash bench/s13/call5.sh "$OUT"   (.device and .kcache carried)
set -u
out=${1:?output folder}
export NO_COLOR=1 ATTNLAB_CACHE_DIR=/tmp/attnlab-verify-cache
export ATTNLAB_COMMIT=${ATTNLAB_COMMIT:-$(cat .device/commit 2>/dev/null || echo unknown)}
mkdir -p "$ATTNLAB_CACHE_DIR"
[ -f .kcache/kernels.tar.xz ] && tar -C "$ATTNLAB_CACHE_DIR" -xJf .kcache/kernels.tar.xz
logs=$out cap=140
source scripts/gpu-lib.sh
shard decode-tma-1 - --test-name-pattern=', 1 row group\(s\), ' test/gpu/decode-tma.test.ts
shard decode-tma-2 - --test-name-pattern=', 2 row group\(s\), ' test/gpu/decode-tma.test.ts
wait
summary 14 10 20
