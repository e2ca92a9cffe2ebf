#!/usr/bin/env bash
# Session 6's one device call for the fused flash backward (issue 15): correctness of both dK/dV loops
# (the mma.sync one, changed by the dO NaN fix and the shared helpers, and the new wgmma one behind
# ATTNLAB_FLASH_BWD_KERNEL=wgmma), sanitizers on the wgmma loop, then ncu on both loops, the loops and
# mma.sync tile configurations timed side by side in one process, and the bench beside PyTorch's
# FlashAttention-2 backward. Run from the project root through .device/on-gpu.sh with $OUT set;
# ATTNLAB_CACHE_DIR may point at a seeded kernel cache. Logs go to $OUT/logs.tar.xz, a table last.
set -u
out=${OUT:?}
logs=$out/logs
mkdir -p "$logs"
export NO_COLOR=1 ATTNLAB_CACHE_DIR=${ATTNLAB_CACHE_DIR:-/tmp/attnlab-cache}
mkdir -p "$ATTNLAB_CACHE_DIR"
cap=${CAP:-50}
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/gpu-lib.sh"  # shard, sanitize, summary (logs, cap)
W=ATTNLAB_FLASH_BWD_KERNEL=wgmma
t0=$SECONDS

# A. correctness, in parallel (NVRTC compiles dominate; 16 cores)
shard fb-mma - test/gpu/flash-backward.test.ts
shard fb-wgmma $W test/gpu/flash-backward.test.ts
shard bw-mma - --test-name-pattern='· flash$' test/gpu/backward.test.ts
shard bw-wgmma $W --test-name-pattern='· flash$' test/gpu/backward.test.ts
shard bwl-mma - --test-name-pattern='· flash (long|deterministic|random deterministic)$' test/gpu/backward.test.ts
shard bwl-wgmma $W --test-name-pattern='· flash (long|deterministic|random deterministic)$' test/gpu/backward.test.ts
ATTNLAB_FLASH_BWD_KERNEL=wgmma sanitize memcheck-wgmma memcheck --test-name-pattern=sanitize test/gpu/flash-backward.test.ts
ATTNLAB_FLASH_BWD_KERNEL=wgmma sanitize racecheck-wgmma racecheck --test-name-pattern='sanitize: MHA' test/gpu/flash-backward.test.ts
# The tile variants' modules, compiled now so that the timing below compiles nothing.
(for t in 128x32x8 64x64x4; do timeout -s KILL "$cap" node --import tsx bench/flash-backward/variants.ts \
  --profile 1 256 2 128 "mma:$t"; done > "$logs/warm.log" 2>&1) &
(nvcc -gencode=arch=compute_90a,code=sm_90a -I src/kernels -DFLASH_D=128 -DFLASH_FP16=0 -cubin \
  -o /tmp/hopper_bwd.cubin src/kernels/hopper/hopper_bwd.cu && cuobjdump -sass /tmp/hopper_bwd.cubin \
  > "$logs/hopper_bwd.sass") > "$logs/sass.log" 2>&1 &
wait
echo "A done at $((SECONDS - t0)) s" | tee "$logs/times.log"

# B. the GPU alone from here on
# ncu: each loop's first non-causal dK/dV launch at B=2 T=S=8192 N=16 H=128 bf16.
timeout -s KILL 30 ncu --clock-control none -k regex:dkdv -c 2 --section SpeedOfLight --section WarpStateStats \
  --section Occupancy --section LaunchStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
  node --import tsx bench/flash-backward/variants.ts --profile 2 8192 16 128 mma wgmma > "$logs/ncu.log" 2>&1
echo "ncu rc=$? at $((SECONDS - t0)) s" | tee -a "$logs/times.log"
timeout -s KILL 40 node --import tsx bench/flash-backward/variants.ts 4 8192 16 128 mma wgmma mma:128x32x8 \
  mma:64x64x4 > "$logs/variants.log" 2>&1
echo "variants rc=$? at $((SECONDS - t0)) s" | tee -a "$logs/times.log"
bench() { node --import tsx src/cli/bin.ts bench --pass backward --batch 4 --seq 8192 --heads 16 --head-dim 128 \
  --dtype bfloat16 --causal false,true --repeats 10 --budget-ms 150 --no-check --ceiling 800 --no-progress "$@"; }
env $W timeout -s KILL 50 bash -c "$(declare -f bench); bench --impl flash --peers torch --name s6-flash-backward-wgmma \
  --json $out/s6-flash-backward-wgmma.json" > "$logs/bench-wgmma.log" 2>&1
echo "bench-wgmma rc=$? at $((SECONDS - t0)) s" | tee -a "$logs/times.log"

{
  echo "== tests (pass fail skipped, rc)"
  summary 12 16 20
  echo "== sass: $(grep -c HGMMA "$logs/hopper_bwd.sass" 2>/dev/null) HGMMA, $(grep -cE 'LDL|STL' "$logs/hopper_bwd.sass" 2>/dev/null) LDL/STL"
  echo "== ncu"
  grep -E "attnlab_flash_bwd_dkdv|Duration|Compute \(SM\) Throughput|Memory Throughput|Registers Per|Achieved Occupancy|Warp Cycles Per Issued|Issue Slots Busy|L1/TEX Hit|Shared Memory" "$logs/ncu.log" | head -40
  echo "== variants (B=4 T=S=8192 N=16 H=128 bf16)"
  cat "$logs/variants.log" | grep -E "causal=|Error" | head -20
  echo "== bench"
  grep -hE "TFLOP|flash|torch" "$logs"/bench-*.log | grep -vE "^\s*$" | tail -16
  cat "$logs/times.log"
} > "$out/summary.txt" 2>&1
tar -C "$out" -cJf "$out/logs.tar.xz" logs && rm -rf "$logs"
cat "$out/summary.txt"
