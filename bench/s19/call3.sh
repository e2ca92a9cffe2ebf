#!/usr/bin/env bash
# Session 19, call 3: why V through registers read 0.17–0.75× the rule in call 2 (correct, sanitizers clean). ncu's
# warp states, scheduler, memory tables and the hottest SASS lines (SourceCounters) of one K=1 B=64 S=16k launch of
# the library's TMA kernel: the rule at block 16 (clustered row groups), V staged by 4 warps at block 16 (one block,
# two splits) and by 8 warps dense (one block).
#   bash .device/on-gpu.sh bash bench/s19/call3.sh "$OUT"   (.device, dist and .kcache carried)
# Ran at a72169c: the staged-V kernel (decodeTuning.stagedWarps) was removed after call 5; check that tree out to rerun.
set -u
out=${1:?output folder}
. scripts/gpu-lib.sh
date -u
nvidia-smi --query-gpu=name,uuid,power.limit --format=csv,noheader
export NO_COLOR=1 ATTNLAB_CACHE_DIR=/tmp/attnlab-decode-cache PATH=/usr/local/cuda/bin:$PATH
mkdir -p "$ATTNLAB_CACHE_DIR"
[ -f .kcache/kernels.tar.xz ] && tar -C "$ATTNLAB_CACHE_DIR" -xJf .kcache/kernels.tar.xz
cp bench/decode/torch_decode.py dist/bench/decode/
profile() { # name, layout, tuning JSON
  timeout -s KILL 150 ncu --clock-control none -k regex:attnlab_flash_decode_tma --launch-skip 8 --launch-count 1 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
    --section Occupancy --section LaunchStats --section SourceCounters \
    node dist/bench/decode/decode-bench.js --out "/tmp/$1.json" --no-uncached --no-kernels-alone --batch 1 \
    --torch none --impl flash --shapes 64:16384:1 --layouts "$2" --tuning "$3" > "$out/ncu-$1.txt" 2>&1
  echo "ncu $1 rc=$? at ${SECONDS} s"
}
profile rule-paged16 paged16 '{}'
profile st4-paged16 paged16 '{"stagedWarps":4}'
profile st8-dense dense '{"stagedWarps":8,"rowGroups":1}'
for f in "$out"/ncu-*.txt; do
  echo "== $f"
  grep -E "attnlab_flash_decode_tma|Duration|Memory Throughput|DRAM Throughput|Warp Cycles Per Issued|Issued Warp|No Eligible|Active Warps Per|Eligible Warps|Registers Per|Achieved Occupancy|Block Size|Stall|stall" "$f" | head -40
done
