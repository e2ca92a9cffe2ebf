#!/usr/bin/env bash
# Session 15, call 1: the TMA kernel's one-row-tile form (kv heads of at most 16 rows: 8 warps of 16 keys on the
# one m16 tile, where two tiles of 4 warps put half the MMAs on padding; decode-tma.ts, oneBlockRowTiles).
# (A) decode-tma.test.ts in its three shards, and memcheck / racecheck / synccheck on the GQA K=8 case at 3 splits
# (the new form); run before decode_call, whose nvidia-smi logger a bare `wait` would wait for. (B) the new form
# against two tiles (decodeTuning.rowTiles = 2), interleaved, two processes each, at K=4 (B=64 S=16k, B=128
# S=8k: 1M tokens) and K=8 (B=64 S=16k), per call and kernels alone, nvidia-smi every 100 ms beside each row
# (table.txt: mean SM MHz and % of samples power-capped, per call then kernels alone). (C) flash and cuDNN beside
# PyTorch, K=8 first, then K=4 (call 3 of session 14: flash's K=4 read 3806–4170 a call there).
#   bash .device/on-gpu.sh bash bench/s15/call1.sh "$OUT"   (.device, .kcache and dist carried)
set -u
out=${1:?output folder}
. scripts/gpu-lib.sh
logs=$out/tests cap=200
mkdir -p "$logs"
export NO_COLOR=1 ATTNLAB_CACHE_DIR=/tmp/attnlab-decode-cache
mkdir -p "$ATTNLAB_CACHE_DIR"
[ -f .kcache/kernels.tar.xz ] && tar -C "$ATTNLAB_CACHE_DIR" -xJf .kcache/kernels.tar.xz
date -u; date; nvidia-smi --query-gpu=name,uuid,power.limit --format=csv,noheader
shard decode-tma-1 - --test-name-pattern=', 1 row group\(s\), ' test/gpu/decode-tma.test.ts
shard decode-tma-2 - --test-name-pattern=', 2 row group\(s\), ' test/gpu/decode-tma.test.ts
shard decode-tma - --test-name-pattern='^(?!.*, [12] row group\(s\), |forced$|flash decode, TMA kernel$|<root>$)' \
  test/gpu/decode-tma.test.ts
for tool in memcheck racecheck synccheck; do
  sanitize "$tool-decode-tma-gqa" "$tool" --test-name-pattern='^GQA 4:1, K=8 .*, 1 row group\(s\), 3 splits' \
    test/gpu/decode-tma.test.ts
done
wait
echo "tests done at ${SECONDS} s"
summary 18 24 20
tar -C "$out" -cJf "$out/tests.tar.xz" tests && rm -rf "$logs"
SMI_MS=100 decode_call "$out"
py=/opt/torch/.venv/bin/python
ab=64:16384:4,128:8192:4,64:16384:8
for n in 1 2; do
  decode_run "one-$n" 60 --torch none --impl flash --shapes $ab
  decode_run "two-$n" 60 --torch none --impl flash --shapes $ab --tuning '{"rowTiles":2}'
done
decode_run peers 150 --torch $py --impl flash,cudnn --shapes 64:16384:8,64:16384:4,128:8192:4
decode_end
tar -C "$ATTNLAB_CACHE_DIR" -cf - $(cd "$ATTNLAB_CACHE_DIR" && ls -d kernels cudnn-plans 2>/dev/null) | xz -T8 -6 \
  > "$out/kernels.tar.xz"
echo "done at ${SECONDS} s"
