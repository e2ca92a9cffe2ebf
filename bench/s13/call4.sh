#!/usr/bin/env bash
# Session 13, call 4 (after call 3 measured the TMA kernel's own combine slower and the library went back to the
# combine kernel by default): the forced own combine (decodeTuning.combine 'fused', with the __syncwarp that
# racecheck's 12 warnings in call 3 asked for) under memcheck, racecheck and synccheck, the decode-tma shard of
# default choices, then fused against the combine kernel twice, interleaved, at the two shapes call 3 saw lose.
#   bash .device/on-gpu.sh bash bench/s13/call4.sh "$OUT"   (.device and .kcache carried)
set -u
out=${1:?output folder}
export NO_COLOR=1 ATTNLAB_CACHE_DIR=/tmp/attnlab-verify-cache
export ATTNLAB_COMMIT=${ATTNLAB_COMMIT:-$(cat .device/commit 2>/dev/null || echo unknown)}
mkdir -p "$ATTNLAB_CACHE_DIR"
[ -f .kcache/kernels.tar.xz ] && tar -C "$ATTNLAB_CACHE_DIR" -xJf .kcache/kernels.tar.xz
logs=$out/logs cap=200
mkdir -p "$logs"
source scripts/gpu-lib.sh
for tool in memcheck racecheck synccheck; do
  sanitize "$tool-decode-tma-fused" "$tool" --test-name-pattern='^merges the splits' test/gpu/decode-tma.test.ts
done
shard decode-tma - --test-name-pattern='^(?!.*, [12] row group\(s\), |forced$|flash decode, TMA kernel$|<root>$)' \
  test/gpu/decode-tma.test.ts
wait
echo "tests done at ${SECONDS} s"
for n in 1 2; do
  for combine in fused kernel; do
    timeout --kill-after=5 60 node --import tsx bench/decode/decode-bench.ts --out "$logs/$combine$n.json" \
      --no-uncached --table-room --torch none --impl flash --no-kernels-alone --layouts dense,paged16 \
      --tuning "{\"combine\":\"$combine\"}" --shapes 8:131072:4,64:65536:1 > "$logs/$combine$n.txt" 2>&1
    echo "$combine$n rc=$? at ${SECONDS} s"
  done
done
python3 bench/s12/table.py "$logs" > "$logs/table.txt"
tar -C "$logs" -cf - . | xz -T8 -6 > "$out/logs.tar.xz"
summary 18 28 20
cat "$logs/table.txt"
