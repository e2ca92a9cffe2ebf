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
set -u
out=${1:?output folder}
harness=${2:?harness binary}
deadline=${3:-200}
logs=$out/logs
mkdir -p "$logs"
export PATH=/usr/local/cuda/bin:$PATH
export NO_COLOR=1 ATTNLAB_CACHE_DIR=/tmp/attnlab-s7-cache ATTNLAB_COMMIT=${ATTNLAB_COMMIT:-s7-hopper-wip}
mkdir -p "$ATTNLAB_CACHE_DIR"
[ -f ../.kcache/kernels.tar.xz ] && tar -C "$ATTNLAB_CACHE_DIR" -xJf ../.kcache/kernels.tar.xz
cap=${TEST_CAP:-110}
source scripts/gpu-lib.sh  # shard, sanitize, summary; sets san
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

for H in 64 128 256; do shard "hopper-h$H" - --test-name-pattern="^H=$H " test/gpu/flash-hopper.test.ts; done
shard hopper-rest - --test-name-pattern='^H=(96|48|120) |bit-identical|NaN|does not cover' test/gpu/flash-hopper.test.ts
for p in bfloat16 float16; do
  shard "wgmma-$p" ATTNLAB_FLASH_KERNEL=wgmma --test-name-pattern="· $p\$" test/gpu/flash.test.ts
done
shard wgmma-other ATTNLAB_FLASH_KERNEL=wgmma --test-name-pattern='other tile configurations|^cuda flash kernel$' \
  test/gpu/flash.test.ts
shard nan - test/gpu/nan.test.ts
shard backward-flash - --test-name-pattern='· flash$' test/gpu/backward.test.ts
for tool in racecheck synccheck; do
  sanitize "$tool-h128" "$tool" --test-name-pattern='^H=128 .*\(bfloat16\)$' test/gpu/flash-hopper.test.ts
  sanitize "$tool-h64" "$tool" --test-name-pattern='^H=64 .*(padding|window|T=S=700).*\(bfloat16\)$' \
    test/gpu/flash-hopper.test.ts
done
sanitize memcheck-h256 memcheck --test-name-pattern='^H=256 .*\(bfloat16\)$' test/gpu/flash-hopper.test.ts
( timeout --kill-after=5 $cap "$harness" check7 > "$logs/harness-check7.log" 2>&1
  echo "rc=$?" >> "$logs/harness-check7.log"
  for tool in memcheck racecheck synccheck; do
    timeout --kill-after=5 60 $san --tool "$tool" --error-exitcode 9 --print-limit 20 "$harness" sanitize7 \
      > "$logs/harness-$tool.san" 2>&1
    echo "rc=$?" >> "$logs/harness-$tool.san"
  done ) &
wait
echo "correctness done at ${SECONDS} s"

timeout --kill-after=5 60 "$harness" time8 > "$out/time8.log" 2>&1
echo "harness time8 rc=$? at ${SECONDS} s"

left=$((deadline - SECONDS))
if [ $left -gt 25 ]; then
  timeout --kill-after=3 $left node --import tsx bench/hopper/s7-bench.ts "$out/s7-bench.json" > "$logs/bench.log" 2>&1
  echo "bench rc=$? at ${SECONDS} s"
else
  echo "bench skipped: ${left} s left"
fi

tar -C "$ATTNLAB_CACHE_DIR" -cf - kernels cudnn-plans 2> /dev/null | xz -T8 -3 > "$out/kernels.tar.xz"
echo "== correctness (pass fail; rc)"
summary 16 18 12
c7=$logs/harness-check7.log
echo "harness check7: $(grep -c '^PASS' "$c7") pass, $(grep -c '^FAIL' "$c7") fail, $(grep -c '^SAME' "$c7") same, $(grep -c '^DIFF' "$c7") diff; $(tail -2 "$c7" | tr '\n' ' ')"
grep -E '^(FAIL|DIFF)' "$c7" | head -5
echo "== sass (P·V wait vs exponentials)"
grep -E '^==|DEPBAR|MUFU' "$out/sass-markers.txt" | head -40
echo "== harness time8"
sed -E 's/ +/ /g; s/wgmma\.//; s/\.overlap\.pingpong//; s/ median=/ /' "$out/time8.log" | cut -c1-110
echo "== bench"
sed -n '/^TFLOP\/s/,$p' "$logs/bench.log" | head -20
tail -2 "$logs/bench.log"
tar -czf "$out/s7-logs.tgz" -C "$out" logs && rm -rf "$logs"
