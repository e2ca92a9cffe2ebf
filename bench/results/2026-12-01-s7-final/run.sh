#!/usr/bin/env bash
# Session 7's last GPU call (lead), on the final main: the whole GPU suite (scripts/gpu-verify.sh), then,
# alone on the GPU, the forward benches whose same-run peer numbers the README and issue 14 cite
# (bench/hopper/s6-bench.ts: the headline shape with PyTorch's flash and cuDNN backends first, then the
# T sweep and GQA with theirs), then `attnlab lab --quick` (every section, lab.json + lab.html).
# From the project root, .device and .kcache carried:
#   bash .device/on-gpu.sh bash bench/results/2026-12-01-s7-final/run.sh "$OUT"
set -u
out=${1:?output folder}
mkdir -p "$out/verify" /tmp/s7-final-logs
bash scripts/gpu-verify.sh "$out/verify" 150 > /tmp/s7-final-logs/verify.txt 2>&1
echo "verify done at ${SECONDS} s"
export ATTNLAB_CACHE_DIR=/tmp/attnlab-verify-cache NO_COLOR=1
export ATTNLAB_COMMIT=${ATTNLAB_COMMIT:-$(cat .device/commit 2>/dev/null || echo unknown)}
timeout --kill-after=5 ${BENCH_CAP:-260} node --import tsx bench/hopper/s6-bench.ts "$out/hopper-bench.json" \
  > /tmp/s7-final-logs/hopper-bench.txt 2>&1
echo "hopper bench rc=$? at ${SECONDS} s"
timeout --kill-after=5 70 node --import tsx src/cli/bin.ts lab --quick --out /tmp/s7-final-lab \
  > /tmp/s7-final-logs/lab.txt 2>&1
echo "lab rc=$? at ${SECONDS} s"
cp /tmp/s7-final-lab/lab.json /tmp/s7-final-lab/lab.html /tmp/s7-final-logs/ 2>/dev/null
mv "$out/verify/kernels.tar.xz" "$out/kernels.tar.xz" 2>/dev/null
cp "$out/verify/logs.tar.xz" /tmp/s7-final-logs/verify-logs.tar.xz 2>/dev/null
rm -rf "$out/verify"
tar -C /tmp/s7-final-logs -cf - . | xz -T8 -6 > "$out/logs.tar.xz"
sed -n '/== summary/,$p' /tmp/s7-final-logs/verify.txt
tail -40 /tmp/s7-final-logs/hopper-bench.txt
tail -5 /tmp/s7-final-logs/lab.txt
