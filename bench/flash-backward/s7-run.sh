#!/usr/bin/env bash
# Session 7's device call for the fused flash backward (issue 15): the one-barrier wgmma dK/dV schedule and
# the paired-head key-block order (hopper/bwd_dkdv_sm90.cuh, flash/bwd_common.cuh key_block_order).
# Run from /work/main's copy on the device, this tree copied into .wt-fbwd beside it (the copy's own root
# is main's tree, the code before the change):
#   bash .device/on-gpu.sh bash .wt-fbwd/bench/flash-backward/s7-run.sh "$OUT"
# A. correctness, in parallel (NVRTC compiles dominate: the edited header recompiles every backward
#    module): the gradient suite's flash shards and flash-backward.test with the new default, and
#    memcheck / racecheck / synccheck on the sanitize cases; ptxas's NVRTC report (bench/flash-backward/
#    nvrtc-regs.ts) and the SASS of the new loop (nvcc + cuobjdump) beside them.
# B. the GPU alone: variants.ts (wgmma and mma loops, rounds alternating) in main's tree and in this one,
#    then one `attnlab bench --pass backward` at H=128 and H=64 with PyTorch's backends in the same run.
set -u
out=${1:?usage: s7-run.sh <output folder>}
root=$PWD
tree=$root/.wt-fbwd
logs=/tmp/s7-logs
mkdir -p "$logs"
export NO_COLOR=1 ATTNLAB_CACHE_DIR=/tmp/s7-cache
export ATTNLAB_COMMIT=${ATTNLAB_COMMIT:-$(cat "$tree/.commit" 2>/dev/null || echo unknown)}
mkdir -p "$ATTNLAB_CACHE_DIR"
[ -f .kcache/kernels.tar.xz ] && tar -C "$ATTNLAB_CACHE_DIR" -xJf .kcache/kernels.tar.xz
cap=${CAP:-100}
source "$tree/scripts/gpu-lib.sh"  # shard, sanitize, summary (logs, cap)
t0=$SECONDS

cd "$tree"
shard fb - test/gpu/flash-backward.test.ts
shard bw - --test-name-pattern='· flash$' test/gpu/backward.test.ts
shard bwl - --test-name-pattern='· flash (long|deterministic|random deterministic)$' test/gpu/backward.test.ts
sanitize memcheck memcheck --test-name-pattern=sanitize test/gpu/flash-backward.test.ts
sanitize racecheck racecheck --test-name-pattern=sanitize test/gpu/flash-backward.test.ts
sanitize synccheck synccheck --test-name-pattern='sanitize: MHA' test/gpu/flash-backward.test.ts
(ATTNLAB_CACHE_DIR=$(mktemp -d) timeout -s KILL 90 node --import tsx bench/flash-backward/nvrtc-regs.ts 64 128 \
  > "$logs/nvrtc-regs.log" 2>&1) &
# The mma.sync D=128 module of this tree, compiled now so that the timing below compiles nothing.
(timeout -s KILL 90 node --import tsx bench/flash-backward/variants.ts --profile 1 256 2 128 mma \
  > "$logs/warm.log" 2>&1) &
(nvcc -gencode=arch=compute_90a,code=sm_90a -I src/kernels -DFLASH_D=128 -DFLASH_FP16=0 -cubin \
  -Xptxas -v -o /tmp/hopper_bwd.cubin src/kernels/hopper/hopper_bwd.cu && cuobjdump -sass /tmp/hopper_bwd.cubin \
  > "$logs/hopper_bwd.sass") > "$logs/sass.log" 2>&1 &
wait
echo "A done at $((SECONDS - t0)) s" | tee "$logs/times.log"

(cd "$root" && timeout -s KILL 45 node --import tsx bench/flash-backward/variants.ts 4 8192 16 128 wgmma mma \
  > "$logs/variants-main.log" 2>&1)
echo "variants main rc=$? at $((SECONDS - t0)) s" | tee -a "$logs/times.log"
timeout -s KILL 45 node --import tsx bench/flash-backward/variants.ts 4 8192 16 128 wgmma mma \
  > "$logs/variants-new.log" 2>&1
echo "variants new rc=$? at $((SECONDS - t0)) s" | tee -a "$logs/times.log"
timeout -s KILL 110 node --import tsx src/cli/bin.ts bench --pass backward --batch 4 --seq 8192 \
  --heads 16 --head-dim 128,64 --dtype bfloat16 --causal false,true --repeats 10 --budget-ms 150 --no-check \
  --ceiling 800 --no-progress --impl flash --peers torch --name s7-flash-backward \
  --json "$out/s7-flash-backward.json" > "$logs/bench.log" 2>&1
echo "bench rc=$? at $((SECONDS - t0)) s" | tee -a "$logs/times.log"

{
  echo "== tests (pass fail skipped, rc)"
  summary 10 10 20
  echo "== sass: $(grep -c HGMMA "$logs/hopper_bwd.sass" 2>/dev/null) HGMMA, $(grep -cE 'LDL|STL' "$logs/hopper_bwd.sass" 2>/dev/null) LDL/STL, $(grep -c WARPGROUP "$logs/hopper_bwd.sass" 2>/dev/null) WARPGROUP"
  grep -E "C75|Used|spill" "$logs/sass.log" | head -8
  echo "== nvrtc ptxas"
  grep -aE "==|Compiling entry|Used|spill" "$logs/nvrtc-regs.log" | grep -B2 -A1 -E "dkdv|==" | head -40
  echo "== variants (B=4 T=S=8192 N=16 H=128 bf16): main, then this tree"
  grep -hE "causal=|Error" "$logs/variants-main.log" "$logs/variants-new.log" | head -12
  echo "== bench"
  grep -hE "TFLOP|flash|torch|Error" "$logs/bench.log" | grep -vE "^\s*$" | tail -24
  cat "$logs/times.log"
} > "$out/summary.txt" 2>&1
tar -C /tmp -cJf "$out/logs.tar.xz" s7-logs
cat "$out/summary.txt"
