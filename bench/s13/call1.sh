#!/usr/bin/env bash
# Session 13, call 1 (bench only, main at the session's start, dist/ carried): does a decode row's rate depend
# on how hot the GPU is? Session 12 saw flash's K=4 rows at B=64 S=16k read 4417 GB/s per call when first in a
# process and 4118 after three K=8 shapes (kernels alone 4484 against 4385), and K=1 dense 4249 early against
# 4086–4117 late. Here the same rows run cold, right after ~40 s of K=8 load, and after a 45 s rest, with
# nvidia-smi logging temperatures, power and clocks every 200 ms; then K=1 at 1M, 2M and 4M cached tokens
# beside PyTorch (the launch's fixed cost weighs most at 1M, a 125 µs call).
#   bash .device/on-gpu.sh bash bench/s13/call1.sh "$OUT"   (.device, .kcache and dist carried)
set -u
out=${1:?output folder}
export NO_COLOR=1 ATTNLAB_CACHE_DIR=/tmp/attnlab-s13-cache
export ATTNLAB_COMMIT=${ATTNLAB_COMMIT:-$(cat .device/commit 2>/dev/null || echo unknown)}
mkdir -p "$ATTNLAB_CACHE_DIR" "$out/runs"
[ -f .kcache/kernels.tar.xz ] && tar -C "$ATTNLAB_CACHE_DIR" -xJf .kcache/kernels.tar.xz
cp bench/decode/torch_decode.py dist/bench/decode/
py=/opt/torch/.venv/bin/python
nvidia-smi --query-gpu=timestamp,temperature.gpu,temperature.memory,power.draw,clocks.sm,clocks.mem,clocks_event_reasons.active,utilization.gpu \
  --format=csv,noheader -lms 200 > "$out/runs/smi.csv" 2>&1 &
smi=$!
mark() { echo "$(date -u +%H:%M:%S.%N | cut -c1-12) $*" >> "$out/runs/marks.txt"; }
run() { # name, cap (s), decode-bench arguments
  local name=$1 cap=$2
  shift 2
  mark "start $name"
  timeout --kill-after=5 "$cap" node dist/bench/decode/decode-bench.js --out "$out/runs/$name.json" --no-uncached "$@" 2>&1 |
    grep -v "UserWarning\|call = lambda" > "$out/runs/$name.txt"
  echo "$name rc=${PIPESTATUS[0]} at ${SECONDS} s"
  mark "end $name"
}
probe=64:16384:1,64:16384:4
sleep 5
run cold 60 --torch none --impl flash,cudnn --shapes $probe
run heat 90 --torch none --impl flash,cudnn --layouts dense,paged16 --no-kernels-alone \
  --shapes 64:16384:8,8:131072:8,128:8192:8,64:16384:8,8:131072:8
run hot 60 --torch none --impl flash,cudnn --shapes $probe
mark "rest"
sleep 45
run rested 60 --torch none --impl flash,cudnn --shapes $probe
run tokens 150 --torch $py --impl flash,cudnn --no-kernels-alone --table-room --shapes 64:16384:1,64:32768:1,64:65536:1
kill $smi
nvidia-smi -q -d TEMPERATURE,PERFORMANCE,POWER,CLOCK > "$out/runs/smi-q.txt" 2>&1
python3 bench/s12/table.py "$out/runs" > "$out/runs/table.txt"
tar -C "$out" -cJf "$out/runs.tar.xz" runs
cp "$out/runs/table.txt" "$out/runs/marks.txt" "$out/"
grep -v efficien "$out/table.txt"
cat "$out/marks.txt"
awk -F', ' '{print $2, $3, $4, $5, $6, $7}' "$out/runs/smi.csv" | sort | uniq -c | sort -rn | head -5
