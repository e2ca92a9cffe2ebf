#!/usr/bin/env bash
# Session 10's first decode call (issue 16, paged MQA K=1 ≥ 4.3 TB/s): is the TMA loader's copy pattern
# the limit? The library's kernel (tma1.4x32.s3f) copies a 128-key tile as 128-byte half-row boxes that
# stride 256 B over 16 KB (two boxes a K or V tile); the .g8/.g16/.g32 variants copy both halves of 8/16/32
# rows in one box of a 5-D map (2/4/8 KB of the cache in address order; Sw128Layout<GROUP>), and the .lo
# variants time the loader alone (consumers only release the stages). Also ncu of the library's kernel and
# of .g16 (bandwidth, stalls, bank conflicts), PyTorch's SDPA on the dense K=1 caches in the same call.
# Harness only, no Node.js. ~60-90 s of wall time.
#   here:   cd /work/wt/decode && nvcc -O2 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I src/kernels \
#             -DDECODE_SPIN_LIMIT=16777216 -Xptxas -v -o bench/decode/harness bench/decode/harness.cu
#           copied to /work/main/.wt-decode (src/kernels, bench/decode with the binary)
#   device: run(carry: [".wt-decode"], command: "cd .wt-decode && bash bench/decode/s10-call2.sh", timeout_s: 300)
set -u
dest=${OUT:-/tmp/out}
out=/tmp/s10-logs
mkdir -p "$dest" "$out" /tmp/s10
. bench/decode/harness-steps.sh
t0=$harness_t0
harness_build "$out" 90
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,power.limit --format=csv,noheader > "$out/gpu.txt" 2>&1
export HARNESS_ONLY=tma1.4x32.s3f
# memcheck of every kept tma variant (quick: dense and paged16, splits 3), racecheck of the first 2 cases
harness_sanitize /tmp/s10/memcheck.san memcheck 99 100
harness_sanitize /tmp/s10/racecheck.san racecheck 2 100
timeout -s KILL 80 ./bench/decode/harness check > "$out/check.log" 2>&1
echo "check rc=$? $((SECONDS - t0))s: $(tail -1 "$out/check.log")"
wait
cat /tmp/s10/*.san > "$out/sanitizers.log"
export HARNESS_SHAPES=64:16384:1,128:8192:1,8:131072:1
for r in 1 2; do
  timeout -s KILL 40 ./bench/decode/harness bench > "$out/bench$r.log" 2>&1
  echo "bench$r rc=$? $((SECONDS - t0))s"
done
unset HARNESS_SHAPES
for v in tma1.4x32.s3f tma1.4x32.s3f.g16; do
  for bs in 0 16; do
    timeout -s KILL 60 ncu --clock-control none -k regex:h_ws_tma --launch-skip 8 --launch-count 1 \
      --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
      --section Occupancy --section LaunchStats \
      --metrics dram__bytes_read.sum.per_second,lts__t_sector_hit_rate.pct,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,smsp__inst_executed_pipe_tensor_op_hmma.avg.pct_of_peak_sustained_active \
      ./bench/decode/harness bench one 64 16384 1 $bs $v > "$out/ncu-$v-$bs.txt" 2>&1
    echo "ncu $v bs=$bs rc=$? $((SECONDS - t0))s"
  done
done
harness_torch "$out" 25 '[{"B":64,"S":16384,"K":1},{"B":128,"S":8192,"K":1},{"B":8,"S":131072,"K":1}]'
harness_summary "$out" tma
grep -hE 'Race reported|Invalid' "$out/sanitizers.log" | sort | uniq -c | head -5
echo "== GB/s (kernels alone, the model's split count), two runs"
for r in 1 2; do grep -E "^(64|128|8) " "$out/bench$r.log" | awk -v r=$r '{print r, $1, $2, $4, $5, $7, $9}'; done | sort -k2,2n -k4,4 -k5,5 | column -t
grep -hE '"(label|backend)"|bandwidth' "$out/torch.json" | head -20
for f in "$out"/ncu-*.txt; do echo "== $f"; grep -E "DRAM Throughput|Memory Throughput|dram__bytes_read|Compute \(SM\)|hit_rate|bank_conflicts|hmma|Issued Warp|No Eligible|Duration|Registers Per|Achieved Occupancy" "$f" | head -14; done
tar -czf "$dest/logs.tgz" -C "$out" . && echo "total $((SECONDS - t0))s"
