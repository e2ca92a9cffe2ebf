#!/usr/bin/env bash
# Session 6's last GPU call (lead), on the final main: the whole GPU suite (scripts/gpu-verify.sh), then,
# alone on the GPU, the benches whose same-run peer numbers the README and the issues cite:
#   1. the Hopper kernel's headline shape, T sweep and GQA beside attnlab cudnn and PyTorch (s6-bench.ts);
#   2. decoding on the library path, flash and cudnn, dense and paged, beside PyTorch (decode-bench.ts);
#   3. `attnlab lab --quick` (every section, lab.json + lab.html).
# From the project root, .device carried:
#   bash .device/on-gpu.sh bash bench/results/2026-12-01-s6-final/run.sh "$OUT"
set -u
out=${1:?output folder}
py=/opt/torch/.venv/bin/python
mkdir -p "$out/verify" /tmp/final-logs
bash scripts/gpu-verify.sh "$out/verify" 150 > /tmp/final-logs/verify.txt 2>&1
echo "verify done at ${SECONDS} s"
export ATTNLAB_CACHE_DIR=/tmp/attnlab-verify-cache NO_COLOR=1
export ATTNLAB_COMMIT=${ATTNLAB_COMMIT:-$(cat .device/commit 2>/dev/null || echo unknown)}
timeout --kill-after=5 200 node --import tsx bench/hopper/s6-bench.ts "$out/hopper-bench.json" \
  > /tmp/final-logs/hopper-bench.txt 2>&1
echo "hopper bench rc=$? at ${SECONDS} s"
timeout --kill-after=5 90 node --import tsx bench/decode/decode-bench.ts --out "$out/decode.json" --torch $py \
  --impl flash,cudnn > /tmp/final-logs/decode-bench.txt 2>&1
echo "decode bench rc=$? at ${SECONDS} s"
timeout --kill-after=5 90 node --import tsx src/cli/bin.ts lab --quick --out /tmp/final-lab \
  > /tmp/final-logs/lab.txt 2>&1
echo "lab rc=$? at ${SECONDS} s"
cp /tmp/final-lab/lab.json /tmp/final-lab/lab.html /tmp/final-logs/ 2>/dev/null
tar -C /tmp/final-logs -cf - . | xz -T8 -6 > "$out/logs.tar.xz"
sed -n '/== summary/,$p' /tmp/final-logs/verify.txt
tail -30 /tmp/final-logs/hopper-bench.txt
tail -16 /tmp/final-logs/decode-bench.txt
tail -3 /tmp/final-logs/lab.txt
