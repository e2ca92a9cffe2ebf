#!/usr/bin/env bash
# Session 19, call 4: where the staged-V kernel's warps wait (call 3: 1.32 TB/s, warps stalled on L1TEX scoreboards,
# ~6.4 µs a tile where the rule takes ~1.1). ncu's per-SASS-instruction samples (source page, CSV) of one launch of
# V staged by 4 warps at block 16 and of the rule, for reading off the device.
#   bash .device/on-gpu.sh bash bench/s19/call4.sh "$OUT"   (.device, dist and .kcache carried)
# Ran at 99d1152: the staged-V kernel (decodeTuning.stagedWarps) was removed after call 5; check that tree out to rerun.
set -u
out=${1:?output folder}
date -u
nvidia-smi --query-gpu=name,uuid,power.limit --format=csv,noheader
export NO_COLOR=1 ATTNLAB_CACHE_DIR=/tmp/attnlab-decode-cache PATH=/usr/local/cuda/bin:$PATH
mkdir -p "$ATTNLAB_CACHE_DIR"
[ -f .kcache/kernels.tar.xz ] && tar -C "$ATTNLAB_CACHE_DIR" -xJf .kcache/kernels.tar.xz
source_page() { # name, layout, tuning JSON
  timeout -s KILL 150 ncu --clock-control none -k regex:attnlab_flash_decode_tma --launch-skip 8 --launch-count 1 \
    --section SourceCounters --section WarpStateStats -o "/tmp/$1" \
    node dist/bench/decode/decode-bench.js --out "/tmp/$1.json" --no-uncached --no-kernels-alone --batch 1 \
    --torch none --impl flash --shapes 64:16384:1 --layouts "$2" --tuning "$3" > "$out/ncu-$1.log" 2>&1
  echo "ncu $1 rc=$? at ${SECONDS} s"
  ncu -i "/tmp/$1.ncu-rep" --page source --csv --print-source sass > "/tmp/$1-sass.csv" 2> "$out/src-$1.err"
  xz -T4 -c "/tmp/$1-sass.csv" > "$out/sass-$1.csv.xz"
  ls -la "$out/sass-$1.csv.xz"
}
source_page st4-paged16 paged16 '{"stagedWarps":4}'
source_page rule-paged16 paged16 '{}'
head -c 600 /tmp/st4-paged16-sass.csv
