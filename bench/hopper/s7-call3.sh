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
# Ran once, from the tree of 7bfe35b (on main as e7a58c0, with its own full copy of these steps); the
# steps it shares with s7-call2.sh are now s7-common.sh's.
set -u
out=${1:?output folder}
harness=${2:?harness binary}
ptree=${3:?persistent tree}
deadline=${4:-125}
source bench/hopper/s7-common.sh
s7_setup 70
[ -e "$ptree/node_modules" ] || ln -s "$PWD/node_modules" "$ptree/node_modules"
here=$PWD

s7_hopper_shards hopper
wgmma_type_shards
shard nan - test/gpu/nan.test.ts
cd "$ptree"
s7_hopper_shards pers
for tool in racecheck synccheck; do
  sanitize "pers-$tool-h128" "$tool" --test-name-pattern='^H=128 .*\(bfloat16\)$' test/gpu/flash-hopper.test.ts
done
cd "$here"
s7_harness_checks check8 sanitize8 40
wait
echo "correctness done at ${SECONDS} s"

s7_harness_time time9 30

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

s7_cache_and_check_summary check8 22
s7_time_table time9
echo "== bench"
sed -n '/^TFLOP\/s/,$p' "$logs/bench.log" | head -12
echo "== bench, persistent tree (flash only)"
sed -n '/^TFLOP\/s/,$p' "$logs/bench-persistent.log" | head -12
tail -2 "$logs/bench-persistent.log"
tar -czf "$out/s7-call3-logs.tgz" -C "$out" logs && rm -rf "$logs"
