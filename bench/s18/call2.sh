#!/usr/bin/env bash
# Session 18, call 2: why the register-direct kernel read ~3.0 TB/s in call 1 (the harness's TMA kernel ~3.8).
# K loads now take whole sectors (call 1's lanes each read half of every sector of a K row) and the softmax takes
# fewer instructions a step (regs_softmax: no mask on whole steps, max.NaN, O rescaled only when a max moves,
# per-lane 32-bit load offsets; call 1 ran ~700 PTX instructions a step and warp); timing-only forms
# without the pair's exchange (.nx) and with the loads alone (.lo, at the full form's 4 blocks a SM); registers
# capped for 6 pairs a SM (.b6); the harness's TMA kernel tma1.4x32.s3f beside them. Then ncu's warp states
# and memory tables for regs.d3q on 16-row pages, and the check and memcheck again (the K layout changed).
#   bash .device/on-gpu.sh bash bench/s18/call2.sh "$OUT"   (.device and tmp carried; tmp/harness: gpu-lib.sh
#   decode_harness_call)
set -u
out=${1:?output folder}
. scripts/gpu-lib.sh
decode_harness_call "$out"
decode_harness_check "$out"
HARNESS_ONLY=regs,tma1.4x32.s3f= HARNESS_SHAPES=64:16384:1 HARNESS_SPLITS=4,8,16 \
  timeout -s KILL 200 $bin bench > "$out/h/bench.txt" 2>&1
echo "bench rc=$? at ${SECONDS} s"
timeout -s KILL 120 ncu --clock-control none -k regex:h_regs --launch-skip 5 --launch-count 1 \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
  --section Occupancy --section LaunchStats $bin bench one 64 16384 1 16 regs.d3q > "$out/h/ncu.txt" 2>&1
echo "ncu rc=$? at ${SECONDS} s"
decode_harness_sanitize "$out" memcheck
grep -h "^#" "$out/h/bench.txt" | grep "regs\|tma"
grep -v "^#" "$out/h/bench.txt" | awk '{print $4, $5, $7, $9}' | sort -k1,1 -k4,4nr | awk '{k=$1" "$2} !(k in s) {s[k]=1; print}'
grep -E "Stall|stall|Warp Cycles|Issued|Throughput|Eligible|Active Warps|Registers|Achieved|L1/TEX Hit|L2 Hit|Mem Busy|Max Bandwidth|Duration" "$out/h/ncu.txt" | head -60
