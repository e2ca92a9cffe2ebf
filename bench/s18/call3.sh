#!/usr/bin/env bash
# Session 18, call 3: K in whole 128-byte lines through a warp-private shared tile (regs …ks, flash_decode_regs.cu
# KSMEM). Call 2's ncu had the L2 at 79% of its throughput while DRAM moved 3.0 TB/s, and the loads-only form read
# 2.5 TB/s: the fragment order's K loads ask half lines (48 line requests a warp and step for 32 lines). (A) the
# check (every regs form, the new ones included); (B) K=1 B=64 S=16k, splits 8 and 16, the forms that matter
# beside tma1.4x32.s3f; (C) ncu: stall reasons and the L2's tables for regs.d3q.ks and regs.d3q at block 16, the
# TMA kernel's memory tables; (D) memcheck and racecheck over the check's first 4 cases.
#   bash .device/on-gpu.sh bash bench/s18/call3.sh "$OUT"   (.device and tmp carried; tmp/harness: gpu-lib.sh
#   decode_harness_call)
set -u
out=${1:?output folder}
. scripts/gpu-lib.sh
decode_harness_call "$out"
decode_harness_check "$out"
HARNESS_ONLY=regs.d3q=,regs.d3q.ks=,regs.d3.ks=,regs.d2q.ks=,regs.d4q.ks=,regs.d3q.ks.lo=,regs.d3q.lo=,tma1.4x32.s3f= \
  HARNESS_SHAPES=64:16384:1 HARNESS_SPLITS=8,16 timeout -s KILL 200 $bin bench > "$out/h/bench.txt" 2>&1
echo "bench rc=$? at ${SECONDS} s"
stalls='regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio'
for v in regs.d3q.ks regs.d3q tma1.4x32.s3f; do
  timeout -s KILL 100 ncu --clock-control none -k regex:'h_regs|h_ws' --launch-skip 5 --launch-count 1 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables \
    --section SchedulerStats --metrics "$stalls" $bin bench one 64 16384 1 16 $v > "$out/h/ncu-$v.txt" 2>&1
  echo "ncu $v rc=$? at ${SECONDS} s"
done
decode_harness_sanitize "$out" memcheck racecheck
grep -v "^#" "$out/h/bench.txt" | awk '{print $4, $5, $7, $9}' | sort -k1,1 -k4,4nr | awk '{k=$1" "$2} !(k in s) {s[k]=1; print}'
for v in regs.d3q.ks regs.d3q tma1.4x32.s3f; do
  echo "== $v"
  grep -E "DRAM Throughput|L2 Cache Throughput|Duration|Issued Warp|stalled_(long|short|wait|barrier|mio|lg|math|no_inst|not_sel)" "$out/h/ncu-$v.txt" |
    awk '$NF+0 > 0.1 || /Throughput|Duration|Issued/' | head -20
done
