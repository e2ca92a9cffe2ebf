#!/usr/bin/env bash
# Session 16, call 3: clustered row groups two ways after call 2 (correct and sanitizer-clean, but 0.68× the rule:
# 2.81 against 4.14 TB/s at K=1 B=64 S=16k dense). 'consumers' (decodeTuning.multicast true): every consumer warp
# releases a stage in both CTAs, now with the arrive's default semantics (call 2 ran release.cluster, a cluster-scope
# fence per warp per tile); 'forwarded': each producer forwards its own consumers' release to the other CTA, one
# remote arrival a tile. (A) both forms' GPU tests, the forwarded form under memcheck, racecheck and synccheck, NVML's
# counters every ~0.5 ms warm; (B) K=1 B=64 S=16k and B=8 S=128k, the rule / consumers / forwarded interleaved, twice.
#   bash .device/on-gpu.sh bash bench/s16/call3.sh "$OUT"   (.device, .kcache and dist carried)
set -u
out=${1:?output folder}
. scripts/gpu-lib.sh
logs=$out/tests cap=230
mkdir -p "$logs"
export NO_COLOR=1 ATTNLAB_CACHE_DIR=/tmp/attnlab-decode-cache
mkdir -p "$ATTNLAB_CACHE_DIR"
[ -f .kcache/kernels.tar.xz ] && tar -C "$ATTNLAB_CACHE_DIR" -xJf .kcache/kernels.tar.xz
date -u; nvidia-smi --query-gpu=name,uuid,power.limit --format=csv,noheader
shard decode-tma-mc - --test-name-pattern=', clustered row groups, ' test/gpu/decode-tma.test.ts
shard decode-tma-mf - --test-name-pattern=', clustered row groups forwarding, ' test/gpu/decode-tma.test.ts
shard decode-tma-rest - --test-name-pattern='^(merges the splits|a decode loop of appends)' test/gpu/decode-tma.test.ts
for tool in memcheck racecheck synccheck; do
  sanitize "$tool-mf-window" "$tool" --test-name-pattern='^window .*, clustered row groups forwarding, 3 splits' \
    test/gpu/decode-tma.test.ts
  sanitize "$tool-mc-mqa" "$tool" --test-name-pattern='^MQA N=32, .*, clustered row groups, 17 splits' \
    test/gpu/decode-tma.test.ts
done
wait
echo "tests done at ${SECONDS} s"
timeout 30 node --import tsx bench/s16/nvml-series.ts > "$logs/nvml-series.txt" 2>&1
summary 18 22 20
head -4 "$logs/nvml-series.txt"; tail -2 "$logs/nvml-series.txt"; wc -l < "$logs/nvml-series.txt"
tar -C "$out" -cJf "$out/tests.tar.xz" tests && rm -rf "$logs"
SMI_MS=100 decode_call "$out"
k1=64:16384:1,8:131072:1
for n in 1 2; do
  decode_run "rule-$n" 60 --torch none --impl flash --shapes $k1
  decode_run "mc-$n" 60 --torch none --impl flash --shapes $k1 --tuning '{"rowGroups":2,"multicast":true}'
  decode_run "mf-$n" 60 --torch none --impl flash --shapes $k1 --tuning '{"rowGroups":2,"multicast":"forwarded"}'
done
decode_end
tar -C "$ATTNLAB_CACHE_DIR" -cf - $(cd "$ATTNLAB_CACHE_DIR" && ls -d kernels cudnn-plans 2>/dev/null) | xz -T8 -6 \
  > "$out/kernels.tar.xz"
echo "done at ${SECONDS} s"
