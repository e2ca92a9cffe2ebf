#!/usr/bin/env bash
# Prepared as session 9's last GPU call and NOT run (no device was lent after 21:13 UTC): the next session's
# first call on main as it stands — the whole GPU suite (scripts/gpu-verify.sh, cap 200 s a
# shard), then alone on the GPU the decode shapes of issue 16 through the library beside PyTorch's SDPA
# (dense, paged 16 and 64; K=8, 4, 1 at B=64 S=16k), then `attnlab lab --quick`.
# From the project root, .device and .kcache carried:
#   bash .device/on-gpu.sh bash bench/s9/final-verify.sh "$OUT"
# Later sessions' calls reuse it with DECODE_SHAPES (B:S:K,…), and DECODE_CAP, VERIFY_CAP (a shard), LAB_CAP
# (seconds).
set -u
shapes=${DECODE_SHAPES:-64:16384:8,64:16384:4,64:16384:1}
out=${1:?output folder}
L=/tmp/final-verify-logs
mkdir -p "$out/verify" $L
bash scripts/gpu-verify.sh "$out/verify" "${VERIFY_CAP:-200}" > $L/verify.txt 2>&1
echo "verify done at ${SECONDS} s"
export ATTNLAB_CACHE_DIR=/tmp/attnlab-verify-cache NO_COLOR=1
export ATTNLAB_COMMIT=${ATTNLAB_COMMIT:-$(cat .device/commit 2>/dev/null || echo unknown)}
timeout --kill-after=5 "${DECODE_CAP:-90}" node --import tsx bench/decode/decode-bench.ts --out $L/decode.json \
  --torch /opt/torch/.venv/bin/python --impl flash,cudnn,auto --table-room --no-uncached \
  --shapes "$shapes" > $L/decode.txt 2>&1
echo "decode rc=$? at ${SECONDS} s"
timeout --kill-after=5 "${LAB_CAP:-75}" node --import tsx src/cli/bin.ts lab --quick --out /tmp/final-verify-lab > $L/lab.txt 2>&1
echo "lab rc=$? at ${SECONDS} s"
cp /tmp/final-verify-lab/lab.json /tmp/final-verify-lab/lab.html $L/ 2>/dev/null
mv "$out/verify/kernels.tar.xz" "$out/kernels.tar.xz" 2>/dev/null
cp "$out/verify/logs.tar.xz" $L/verify-logs.tar.xz 2>/dev/null
rm -rf "$out/verify"
tar -C $L -cf - . | xz -T8 -6 > "$out/logs.tar.xz"
sed -n '/== summary/,$p' $L/verify.txt
grep -E "GB/s|K=" $L/decode.txt | tail -30
tail -4 $L/lab.txt
