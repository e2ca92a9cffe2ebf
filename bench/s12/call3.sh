#!/usr/bin/env bash
# Session 12, call 3, after the TMA decode kernel took over from the heads kernel wherever that one ran and
# from the row-tile kernel on short MQA caches (decode-tma.ts, tmaPreferred / tmaPreferredShort): the decode
# GPU tests as scripts/gpu-verify.sh shards them (decode-tma.test.ts with its new K=8 case, decode.test.ts)
# and memcheck on the K=8 case; then, alone on the GPU, issue 16's shapes (K=8, 4, 1 at B=64 S=16k, B=8
# S=128k, B=128 S=8k; dense, paged 16 and 64) through the library beside PyTorch, the heads kernel forced
# on the K=8 and K=4 ones (what the rule ran before), and B=1 K=1 at S=2k/8k/32k.
#   bash .device/on-gpu.sh bash bench/s12/call3.sh "$OUT"   (.device and .kcache carried)
set -u
out=${1:?output folder}
export NO_COLOR=1 ATTNLAB_CACHE_DIR=/tmp/attnlab-s12-cache
export ATTNLAB_COMMIT=${ATTNLAB_COMMIT:-$(cat .device/commit 2>/dev/null || echo unknown)}
mkdir -p "$ATTNLAB_CACHE_DIR" "$out/runs"
[ -f .kcache/kernels.tar.xz ] && tar -C "$ATTNLAB_CACHE_DIR" -xJf .kcache/kernels.tar.xz
logs=$out/runs cap=200
source scripts/gpu-lib.sh  # shard, sanitize, summary
shard decode-tma-1 - --test-name-pattern=', 1 row group\(s\), ' test/gpu/decode-tma.test.ts
shard decode-tma-2 - --test-name-pattern=', 2 row group\(s\), ' test/gpu/decode-tma.test.ts
shard decode-tma - --test-name-pattern='^(?!.*, [12] row group\(s\), |forced$|flash decode, TMA kernel$|<root>$)' \
  test/gpu/decode-tma.test.ts
shard decode-forced-loaders - --test-name-pattern='^forced (bulk|async) loader' test/gpu/decode.test.ts
shard decode-forced-kernels - --test-name-pattern='^forced (heads|rows) kernel' test/gpu/decode.test.ts
shard decode - --test-name-pattern='^(?!forced |dense and paged 16: |flash decode kernel$|<root>$)' \
  test/gpu/decode.test.ts
sanitize memcheck-decode-tma-gqa memcheck --test-name-pattern='^GQA 4:1, K=8 .*, [12] row group\(s\), 3 splits' \
  test/gpu/decode-tma.test.ts
wait
echo "tests done at ${SECONDS} s"
py=/opt/torch/.venv/bin/python
run() { # name, cap (s), decode-bench arguments
  local name=$1 cap=$2
  shift 2
  timeout --kill-after=5 "$cap" node --import tsx bench/decode/decode-bench.ts --out "$out/runs/$name.json" \
    --no-uncached "$@" 2>&1 | grep -v "UserWarning\|call = lambda" > "$out/runs/$name.txt"
  echo "$name rc=${PIPESTATUS[0]} at ${SECONDS} s"
}
k84=64:16384:8,8:131072:8,128:8192:8,64:16384:4,8:131072:4,128:8192:4
run big 200 --torch $py --impl flash,cudnn --table-room --shapes $k84,64:16384:1,8:131072:1,128:8192:1
run heads 80 --torch none --tuning '{"kernel":"heads"}' --shapes $k84
run small 80 --torch $py --impl flash,cudnn --table-room --shapes 1:2048:1,1:8192:1,1:32768:1
tar -C "$ATTNLAB_CACHE_DIR" -cJf "$out/kernels.tar.xz" .
summary 24 24 10 > "$out/tests.txt"
tar -C "$out" -cJf "$out/runs.tar.xz" runs
python3 bench/s12/table.py "$out/runs" > "$out/table.txt"
rm -rf "$out/runs"
cat "$out/tests.txt"
grep -v "efficien" "$out/table.txt"
