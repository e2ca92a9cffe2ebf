#!/usr/bin/env bash
# Session 7, the hopper engineer's third device call: the library's final choice checked and timed,
# beside the persistent grid. Two trees travel: this one (the library's table as it lands: late P·V
# wait and stepped descriptors, the 2-D grid) and <persistent tree> (the same with persistent: true).
# Run from this tree through .device/on-gpu.sh:
#   bash ../.device/on-gpu.sh bash bench/hopper/s7-call3.sh "$OUT" <harness> <persistent tree> [deadline s]
#   1. correctness, all at once: the library's Hopper files in both trees (sanitizers on the
#      persistent one), the harness's check8 (oracle + bit for bit against the base, many items per
#      block) and sanitize8 under memcheck, racecheck and synccheck;
#   2. harness time9 alone on the GPU;
#   3. bench/hopper/s7-bench.ts in this tree, then --flash-only in the persistent tree, in the time left.
set -u
out=${1:?output folder}
harness=${2:?harness binary}
ptree=${3:?persistent tree}
deadline=${4:-125}
logs=$out/logs
mkdir -p "$logs"
export PATH=/usr/local/cuda/bin:$PATH
export NO_COLOR=1 ATTNLAB_CACHE_DIR=/tmp/attnlab-s7-cache ATTNLAB_COMMIT=${ATTNLAB_COMMIT:-s7-hopper-wip}
mkdir -p "$ATTNLAB_CACHE_DIR"
[ -f ../.kcache/kernels.tar.xz ] && tar -C "$ATTNLAB_CACHE_DIR" -xJf ../.kcache/kernels.tar.xz
[ -e "$ptree/node_modules" ] || ln -s "$PWD/node_modules" "$ptree/node_modules"
cap=${TEST_CAP:-70}
source scripts/gpu-lib.sh # shard, sanitize, summary; sets san
here=$PWD

for H in 64 128 256; do shard "hopper-h$H" - --test-name-pattern="^H=$H " test/gpu/flash-hopper.test.ts; done
shard hopper-rest - --test-name-pattern='^H=(96|48|120) |bit-identical|NaN|does not cover' test/gpu/flash-hopper.test.ts
for p in bfloat16 float16; do
  shard "wgmma-$p" ATTNLAB_FLASH_KERNEL=wgmma --test-name-pattern="· $p\$" test/gpu/flash.test.ts
done
shard nan - test/gpu/nan.test.ts
cd "$ptree"
for H in 64 128 256; do shard "pers-h$H" - --test-name-pattern="^H=$H " test/gpu/flash-hopper.test.ts; done
shard pers-rest - --test-name-pattern='^H=(96|48|120) |bit-identical|NaN|does not cover' test/gpu/flash-hopper.test.ts
for tool in racecheck synccheck; do
  sanitize "pers-$tool-h128" "$tool" --test-name-pattern='^H=128 .*\(bfloat16\)$' test/gpu/flash-hopper.test.ts
done
cd "$here"
( timeout --kill-after=5 $cap "$harness" check8 > "$logs/harness-check8.log" 2>&1
  echo "rc=$?" >> "$logs/harness-check8.log"
  for tool in memcheck racecheck synccheck; do
    timeout --kill-after=5 40 $san --tool "$tool" --error-exitcode 9 --print-limit 20 "$harness" sanitize8 \
      > "$logs/harness-$tool.san" 2>&1
    echo "rc=$?" >> "$logs/harness-$tool.san"
  done ) &
wait
echo "correctness done at ${SECONDS} s"

timeout --kill-after=5 30 "$harness" time9 > "$out/time9.log" 2>&1
echo "harness time9 rc=$? at ${SECONDS} s"

left=$((deadline - SECONDS))
if [ $left -gt 15 ]; then
  timeout --kill-after=3 $left node --import tsx bench/hopper/s7-bench.ts "$out/s7-bench.json" > "$logs/bench.log" 2>&1
  echo "bench rc=$? at ${SECONDS} s"
fi
left=$((deadline - SECONDS))
if [ $left -gt 12 ]; then
  (cd "$ptree" && timeout --kill-after=3 $left node --import tsx bench/hopper/s7-bench.ts "$out/s7-bench-persistent.json" \
    --flash-only > "$logs/bench-persistent.log" 2>&1)
  echo "bench persistent rc=$? at ${SECONDS} s"
fi

tar -C "$ATTNLAB_CACHE_DIR" -cf - kernels cudnn-plans 2> /dev/null | xz -T8 -3 > "$out/kernels.tar.xz"
echo "== correctness (pass fail; rc)"
summary 16 22 12
c8=$logs/harness-check8.log
echo "harness check8: $(grep -c '^PASS' "$c8") pass, $(grep -c '^FAIL' "$c8") fail, $(grep -c '^SAME' "$c8") same, $(grep -c '^DIFF' "$c8") diff; $(tail -2 "$c8" | tr '\n' ' ')"
grep -E '^(FAIL|DIFF)' "$c8" | head -5
echo "== harness time9"
sed -E 's/ +/ /g; s/wgmma\.//; s/\.overlap\.pingpong//; s/ median=/ /' "$out/time9.log" | cut -c1-110
echo "== bench"
sed -n '/^TFLOP\/s/,$p' "$logs/bench.log" | head -12
echo "== bench, persistent tree (flash only)"
sed -n '/^TFLOP\/s/,$p' "$logs/bench-persistent.log" | head -12
tail -2 "$logs/bench-persistent.log"
tar -czf "$out/s7-call3-logs.tgz" -C "$out" logs && rm -rf "$logs"
