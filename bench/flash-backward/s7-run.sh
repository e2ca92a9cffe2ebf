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
# The defaults are the first call's; the second (the wgmma loop at D=64, opt-in) set
#   S7_VARS=ATTNLAB_FLASH_BWD_KERNEL=wgmma  the tests, sanitizers and bench with the wgmma loop asked for
#   S7_MAIN=0                               no variants run in main's tree
#   S7_DIMS="64 128"                        head dims of this tree's variants runs
#   S7_BENCH_DIMS=64 S7_NAME=s7-flash-backward-d64
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
vars=${S7_VARS:--}
name=${S7_NAME:-s7-flash-backward}
source "$tree/scripts/gpu-lib.sh"  # shard, sanitize, summary (logs, cap)
t0=$SECONDS

cd "$tree"
shard fb "$vars" test/gpu/flash-backward.test.ts
shard bw "$vars" --test-name-pattern='· flash$' test/gpu/backward.test.ts
shard bwl "$vars" --test-name-pattern='· flash (long|deterministic|random deterministic)$' test/gpu/backward.test.ts
[ "$vars" = - ] || export "${vars?}"  # the sanitizers' processes take it from the environment
sanitize memcheck memcheck --test-name-pattern=sanitize test/gpu/flash-backward.test.ts
sanitize racecheck racecheck --test-name-pattern=sanitize test/gpu/flash-backward.test.ts
sanitize synccheck synccheck --test-name-pattern='sanitize: (MHA|GQA)' test/gpu/flash-backward.test.ts
(ATTNLAB_CACHE_DIR=$(mktemp -d) timeout -s KILL 90 node --import tsx bench/flash-backward/nvrtc-regs.ts 64 128 \
  > "$logs/nvrtc-regs.log" 2>&1) &
# This tree's mma.sync modules for the variants below, compiled now so that the timing compiles nothing.
(for d in ${S7_DIMS:-128}; do timeout -s KILL 90 node --import tsx bench/flash-backward/variants.ts --profile 1 256 2 \
  "$d" mma; done > "$logs/warm.log" 2>&1) &
(for d in ${S7_DIMS:-128}; do nvcc -gencode=arch=compute_90a,code=sm_90a -I src/kernels -DFLASH_D=$d -DFLASH_FP16=0 \
  -cubin -Xptxas -v -o /tmp/hopper_bwd.cubin src/kernels/hopper/hopper_bwd.cu && cuobjdump -sass /tmp/hopper_bwd.cubin \
  > "$logs/hopper_bwd_d$d.sass"; done) > "$logs/sass.log" 2>&1 &
wait
echo "A done at $((SECONDS - t0)) s" | tee "$logs/times.log"

if [ "${S7_MAIN:-1}" = 1 ]; then
  (cd "$root" && timeout -s KILL 45 node --import tsx bench/flash-backward/variants.ts 4 8192 16 128 wgmma mma \
    > "$logs/variants-main.log" 2>&1)
  echo "variants main rc=$? at $((SECONDS - t0)) s" | tee -a "$logs/times.log"
fi
for d in ${S7_DIMS:-128}; do
  timeout -s KILL 45 node --import tsx bench/flash-backward/variants.ts 4 8192 16 "$d" wgmma mma \
    > "$logs/variants-new-d$d.log" 2>&1
  echo "variants new D=$d rc=$? at $((SECONDS - t0)) s" | tee -a "$logs/times.log"
done
timeout -s KILL 110 node --import tsx src/cli/bin.ts bench --pass backward --batch 4 --seq 8192 \
  --heads 16 --head-dim "${S7_BENCH_DIMS:-128,64}" --dtype bfloat16 --causal false,true --repeats 10 --budget-ms 150 --no-check \
  --ceiling 800 --no-progress --impl flash --peers torch --name "$name" --json "$out/$name.json" \
  > "$logs/bench.log" 2>&1
echo "bench rc=$? at $((SECONDS - t0)) s" | tee -a "$logs/times.log"

{
  echo "== tests (pass fail skipped, rc)"
  summary 10 10 20
  for f in "$logs"/hopper_bwd_d*.sass; do
    echo "== sass $(basename "$f"): $(grep -c HGMMA "$f") HGMMA, $(grep -cE 'LDL|STL' "$f") LDL/STL, $(grep -c WARPGROUP "$f") WARPGROUP"
  done
  grep -E "C75|Used|spill" "$logs/sass.log" | head -8
  echo "== nvrtc ptxas"
  grep -aE "==|Compiling entry|Used|spill" "$logs/nvrtc-regs.log" | grep -B2 -A1 -E "dkdv|==" | head -40
  echo "== variants (B=4 T=S=8192 N=16 H=128 bf16): main, then this tree"
  grep -hE "causal=|Error" "$logs"/variants-*.log | head -16
  echo "== bench"
  grep -hE "TFLOP|flash|torch|Error" "$logs/bench.log" | grep -vE "^\s*$" | tail -24
  cat "$logs/times.log"
} > "$out/summary.txt" 2>&1
tar -C /tmp -cJf "$out/logs.tar.xz" s7-logs
cat "$out/summary.txt"
