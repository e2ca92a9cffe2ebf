#!/usr/bin/env bash
# Session 12, call 6 (bench only): issue 16's 1M-token shapes (K=8, 4, 1 at B=64 S=16k, B=8 S=128k, B=128
# S=8k; dense, paged 16 and 64, tables with room) through the compiled library (dist/) beside PyTorch, per
# call only (20 a pair; at 1M tokens the host is far under the kernels): in call 5 flash's K=4 rows through
# dist read within 1–2.5% of its kernels alone (4417 / 4314 / 4387 GB/s at B=64) where call 3's, through
# tsx, read 6–13% under.
#   bash .device/on-gpu.sh bash bench/s12/call6.sh "$OUT"   (.device, .kcache and dist carried)
set -u
out=${1:?output folder}
export NO_COLOR=1 ATTNLAB_CACHE_DIR=/tmp/attnlab-s12-cache
export ATTNLAB_COMMIT=${ATTNLAB_COMMIT:-$(cat .device/commit 2>/dev/null || echo unknown)}
mkdir -p "$ATTNLAB_CACHE_DIR" "$out/runs"
[ -f .kcache/kernels.tar.xz ] && tar -C "$ATTNLAB_CACHE_DIR" -xJf .kcache/kernels.tar.xz
cp bench/decode/torch_decode.py dist/bench/decode/
timeout --kill-after=5 150 node dist/bench/decode/decode-bench.js --out "$out/runs/big.json" --no-uncached \
  --no-kernels-alone --torch /opt/torch/.venv/bin/python --impl flash,cudnn --table-room \
  --shapes 64:16384:8,8:131072:8,128:8192:8,64:16384:4,8:131072:4,128:8192:4,64:16384:1,8:131072:1,128:8192:1 \
  2>&1 | grep -v "UserWarning\|call = lambda" > "$out/runs/big.txt"
echo "big rc=${PIPESTATUS[0]} at ${SECONDS} s"
python3 bench/s12/table.py "$out/runs" > "$out/table.txt"
cp "$out/runs/big.json" "$out/runs/big.txt" "$out/"
rm -rf "$out/runs"
grep -v efficien "$out/table.txt"
