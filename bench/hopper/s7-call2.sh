#!/usr/bin/env bash
# Session 7, the hopper engineer's second device call: session 7's schedule (late P·V wait, stepped
# descriptors, grouped longest-first grid; tiles.cuh) checked and timed. Run from the worktree copy
# through .device/on-gpu.sh:
#   bash ../.device/on-gpu.sh bash bench/hopper/s7-call2.sh "$OUT" <harness binary> [deadline s]
#   0. SASS: where the P·V wait sits in the old and new kernels (bench/hopper/sass-markers.py);
#   1. correctness, all at once (one kernel cache, one process per shard): the library's GPU files
#      that reach the Hopper kernel (the new schedule is the library's default in this tree), the
#      library under racecheck/synccheck/memcheck, the harness's check7 (oracle + bit-identical to
#      the base variant) and its sanitize7 under memcheck, racecheck and synccheck;
#   2. harness time8 alone on the GPU (each schedule beside the base, interleaved twice);
#   3. bench/hopper/s7-bench.ts (attnlab flash beside attnlab cudnn, same run) in the time left.
# Ran once, from the tree of 9bf96c9 (its own full copy of these steps); the steps it shares with
# s7-call3.sh are now s7-common.sh's.
set -u
out=${1:?output folder}
harness=${2:?harness binary}
deadline=${3:-200}
source bench/hopper/s7-common.sh
s7_setup 110
if ! timeout -s KILL 20 "$harness" none > /dev/null 2>&1; then
  echo "carried harness failed to start; building here"
  timeout -s KILL 150 nvcc -O2 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I src/kernels -o /tmp/harness \
    bench/hopper/harness.cu > "$logs/build.log" 2>&1
  harness=/tmp/harness
fi

# 0. SASS markers of the base and the session-7 kernels.
k='_Z13hopper_kernelI12HopperConfigILi'
for f in 128ELi128ELi2ELb0ELb1ELi0ELb0ELi2ELb1ELb0ELb0ELb0 128ELi128ELi2ELb0ELb1ELi0ELb0ELi2ELb1ELb1ELb0ELb0 \
  128ELi128ELi2ELb0ELb1ELi0ELb0ELi2ELb1ELb1ELb1ELb1 256ELi80ELi2ELb0ELb1ELi0ELb0ELi2ELb1ELb1ELb1ELb1 \
  64ELi128ELi2ELb0ELb1ELi0ELb0ELi3ELb1ELb1ELb1ELb1; do
  echo "== $f"
  timeout -s KILL 30 cuobjdump -sass -fun "${k}${f}ELi0EEEv12HopperParams" "$harness" | python3 bench/hopper/sass-markers.py
done > "$out/sass-markers.txt" 2>&1

s7_hopper_shards hopper
wgmma_type_shards
wgmma_other_shard
shard nan - test/gpu/nan.test.ts
shard backward-flash - --test-name-pattern='· flash$' test/gpu/backward.test.ts
for tool in racecheck synccheck; do
  sanitize "$tool-h128" "$tool" --test-name-pattern='^H=128 .*\(bfloat16\)$' test/gpu/flash-hopper.test.ts
  sanitize "$tool-h64" "$tool" --test-name-pattern='^H=64 .*(padding|window|T=S=700).*\(bfloat16\)$' \
    test/gpu/flash-hopper.test.ts
done
sanitize memcheck-h256 memcheck --test-name-pattern='^H=256 .*\(bfloat16\)$' test/gpu/flash-hopper.test.ts
s7_harness_checks check7 sanitize7 60
wait
echo "correctness done at ${SECONDS} s"

s7_harness_time time8 60

left=$((deadline - SECONDS))
if [ $left -gt 25 ]; then
  timeout --kill-after=3 $left node --import tsx bench/hopper/s7-bench.ts "$out/s7-bench.json" > "$logs/bench.log" 2>&1
  echo "bench rc=$? at ${SECONDS} s"
else
  echo "bench skipped: ${left} s left"
fi

s7_cache_and_check_summary check7 18
echo "== sass (P·V wait vs exponentials)"
grep -E '^==|DEPBAR|MUFU' "$out/sass-markers.txt" | head -40
s7_time_table time8
echo "== bench"
sed -n '/^TFLOP\/s/,$p' "$logs/bench.log" | head -20
tail -2 "$logs/bench.log"
tar -czf "$out/s7-logs.tgz" -C "$out" logs && rm -rf "$logs"
