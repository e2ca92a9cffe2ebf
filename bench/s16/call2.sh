#!/usr/bin/env bash
# Session 16, call 2: the TMA decode kernel's row groups as two-CTA clusters with multicast copies (decodeTuning
# multicast; flash_decode_ws.cu MULTICAST). (A) correctness first: decode-tma.test.ts's clustered row groups
# (4 cases × 4 split counts × dense and pages of 8…256), its fused-combine and decode-loop tests, the window and
# GQA cases under memcheck, racecheck and synccheck; NVML's counters read every ~0.5 ms (bench/s16/nvml-series.ts).
# (B) then K=1 interleaved, the rule against clustered row groups, two processes each: B=64 S=16k (1M tokens),
# B=8 S=128k, B=64 S=64k; dense and blocks 16 and 64.
#   bash .device/on-gpu.sh bash bench/s16/call2.sh "$OUT"   (.device and dist carried)
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
shard decode-tma-rest - --test-name-pattern='^(merges the splits|a decode loop of appends)' test/gpu/decode-tma.test.ts
for tool in memcheck racecheck synccheck; do
  sanitize "$tool-mc-window" "$tool" --test-name-pattern='^window .*, clustered row groups, 3 splits' \
    test/gpu/decode-tma.test.ts
  sanitize "$tool-mc-mqa" "$tool" --test-name-pattern='^MQA N=32, .*, clustered row groups, 17 splits' \
    test/gpu/decode-tma.test.ts
done
wait
echo "tests done at ${SECONDS} s"
timeout 30 node --import tsx bench/s16/nvml-series.ts > "$logs/nvml-series.txt" 2>&1
summary 18 22 20
head -3 "$logs/nvml-series.txt"; tail -2 "$logs/nvml-series.txt"; wc -l < "$logs/nvml-series.txt"
tar -C "$out" -cJf "$out/tests.tar.xz" tests && rm -rf "$logs"
SMI_MS=100 decode_call "$out"
k1=64:16384:1,8:131072:1,64:65536:1
for n in 1 2; do
  decode_run "rule-$n" 90 --torch none --impl flash --shapes $k1
  decode_run "mc-$n" 90 --torch none --impl flash --shapes $k1 --tuning '{"rowGroups":2,"multicast":true}'
done
decode_end
tar -C "$ATTNLAB_CACHE_DIR" -cf - $(cd "$ATTNLAB_CACHE_DIR" && ls -d kernels cudnn-plans 2>/dev/null) | xz -T8 -6 \
  > "$out/kernels.tar.xz"
echo "done at ${SECONDS} s"
