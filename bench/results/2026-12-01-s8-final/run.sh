#!/usr/bin/env bash
# Session 8's last GPU call (lead), on the final main: the whole GPU suite (scripts/gpu-verify.sh, cap 200 s a
# shard: the Hopper sources changed, so every wgmma variant compiles cold), then alone on the GPU: the H=192
# headline shape with PyTorch's flash and cuDNN backends (bench/hopper/s6-bench.ts --quick --head-dims=192),
# the paged MQA decode case that reads 0.9 TB/s through the library (B=64 S=16k K=1, blocks 16 and 64) under
# node --cpu-prof, the host-cost bench on this machine's CPU, then `attnlab lab --quick`.
# From the project root, .device and .kcache carried:
#   bash .device/on-gpu.sh bash bench/results/2026-12-01-s8-final/run.sh "$OUT"
set -u
out=${1:?output folder}
L=/tmp/s8-final-logs
mkdir -p "$out/verify" $L
bash scripts/gpu-verify.sh "$out/verify" 200 > $L/verify.txt 2>&1
echo "verify done at ${SECONDS} s"
export ATTNLAB_CACHE_DIR=/tmp/attnlab-verify-cache NO_COLOR=1
export ATTNLAB_COMMIT=${ATTNLAB_COMMIT:-$(cat .device/commit 2>/dev/null || echo unknown)}
timeout --kill-after=5 120 node --import tsx bench/hopper/s6-bench.ts "$L/h200-s8-final-h192.json" --quick \
  --head-dims=192 > $L/h192-bench.txt 2>&1
echo "h192 bench rc=$? at ${SECONDS} s"
timeout --kill-after=5 45 node --cpu-prof --cpu-prof-dir=$L/prof --import tsx bench/decode/decode-bench.ts \
  --out $L/decode-k1.json --torch none --impl flash,cudnn --shapes 64:16384:1 --layouts paged16,paged64 \
  --table-room --no-uncached > $L/decode-k1.txt 2>&1
echo "decode k1 rc=$? at ${SECONDS} s"
timeout --kill-after=5 30 node --import tsx bench/decode/host-cost.ts > $L/host-cost.txt 2>&1
echo "host-cost rc=$? at ${SECONDS} s"
timeout --kill-after=5 75 node --import tsx src/cli/bin.ts lab --quick --out /tmp/s8-final-lab > $L/lab.txt 2>&1
echo "lab rc=$? at ${SECONDS} s"
cp /tmp/s8-final-lab/lab.json /tmp/s8-final-lab/lab.html $L/ 2>/dev/null
mv "$out/verify/kernels.tar.xz" "$out/kernels.tar.xz" 2>/dev/null
cp "$out/verify/logs.tar.xz" $L/verify-logs.tar.xz 2>/dev/null
rm -rf "$out/verify"
tar -C $L -cf - . | xz -T8 -6 > "$out/logs.tar.xz"
sed -n '/== summary/,$p' $L/verify.txt
tail -12 $L/h192-bench.txt
grep -E "GB/s|paged" $L/decode-k1.txt | tail -6
tail -12 $L/host-cost.txt
tail -4 $L/lab.txt
