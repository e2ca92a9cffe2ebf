#!/usr/bin/env bash
# Session 11's last device call, on main after programmatic dependent launches became opt-in
# (ATTNLAB_DEPENDENT_LAUNCH=1): decode-tma.test.ts in its three gpu-verify shards (both forms, plain
# launches by default; the decode loop also with dependent ones), then alone on the GPU the K=1 decode
# shapes through the library beside PyTorch, and bench/s11/auto-host.ts (host vs device time per call).
#   bash .device/on-gpu.sh bash bench/s11/final-check.sh "$OUT"   (.device and .kcache carried)
set -u
out=${1:?output folder}
export NO_COLOR=1 ATTNLAB_CACHE_DIR=/tmp/attnlab-final-cache
export ATTNLAB_COMMIT=${ATTNLAB_COMMIT:-$(cat .device/commit 2>/dev/null || echo unknown)}
mkdir -p "$ATTNLAB_CACHE_DIR"
[ -f .kcache/kernels.tar.xz ] && tar -C "$ATTNLAB_CACHE_DIR" -xJf .kcache/kernels.tar.xz
logs=$out cap=150
source scripts/gpu-lib.sh  # shard, summary
shard decode-tma-1 - --test-name-pattern=', 1 row group\(s\), ' test/gpu/decode-tma.test.ts
shard decode-tma-2 - --test-name-pattern=', 2 row group\(s\), ' test/gpu/decode-tma.test.ts
shard decode-tma - --test-name-pattern='^(?!.*, [12] row group\(s\), |forced$|flash decode, TMA kernel$|<root>$)' \
  test/gpu/decode-tma.test.ts
wait
echo "tests done at ${SECONDS} s"
timeout --kill-after=5 90 node --import tsx bench/decode/decode-bench.ts --out "$out/decode.json" \
  --torch /opt/torch/.venv/bin/python --impl flash,cudnn,auto --table-room --no-uncached \
  --shapes 64:16384:1,8:131072:1 2>&1 | grep -v "UserWarning\|call = lambda" > "$out/decode.txt"
echo "decode done at ${SECONDS} s"
timeout --kill-after=5 60 node --import tsx bench/s11/auto-host.ts > "$out/host.txt" 2>&1
echo "host rc=$? at ${SECONDS} s"
summary 14 14 10
grep -E "K=1" "$out/decode.txt"
grep round "$out/host.txt"
