#!/usr/bin/env bash
# Session 11, call 2: the cluster variants (.c2: two CTAs share a key range by multicast copies, each with
# 16 of MQA's 32 query rows) checked against the float reference, under memcheck / racecheck / synccheck,
# then timed beside the library's tma1.4x32.s3f and the loader ceiling, same run. Harness only.
#   device: run(carry: [".wt-decode"], command: "cd .wt-decode && bash bench/decode/s11-call2.sh", timeout_s: 300)
set -u
dest=${OUT:-/tmp/out}
only=tma1.8x16.s3f.c2,tma1.4x32.s3f.c2,tma1.4x16.s6f.c2,tma1.4x32.s3f
HARNESS_ONLY=$only timeout -s KILL 60 ./bench/decode/harness check > "$dest/check.txt" 2>&1
echo "check rc=$? $(tail -1 "$dest/check.txt")"
for tool in memcheck racecheck synccheck; do
  HARNESS_ONLY=tma1.8x16.s3f.c2,tma1.4x16.s6f.c2 timeout -s KILL 120 compute-sanitizer --tool $tool \
    ./bench/decode/harness check quick > "$dest/$tool.txt" 2>&1
  echo "$tool rc=$? $(grep -E "ERROR SUMMARY|RACECHECK SUMMARY|check:" "$dest/$tool.txt" | tr '\n' ' ')"
done
HARNESS_L2=none timeout -s KILL 50 ./bench/decode/harness ceiling > "$dest/ceiling.txt" 2>&1
echo "ceiling rc=$?"
HARNESS_ONLY=$only,tma1.8x16.s3f.c2.lo HARNESS_L2=none HARNESS_SPLITS=1,2,4 \
  HARNESS_SHAPES=64:16384:1,128:8192:1,8:131072:1,16:8192:1,1:32768:1 \
  timeout -s KILL 90 ./bench/decode/harness bench > "$dest/bench.txt" 2>&1
echo "bench rc=$?"
grep -c "^FAIL" "$dest/check.txt"; grep "^FAIL" "$dest/check.txt" | head -5
grep -E "^(64|128) " "$dest/ceiling.txt" | grep splits
grep -E "^(64|128|8|16|1) " "$dest/bench.txt" | grep -E " tma1" | awk '{print $1, $2, $4, $5, $7, $9}'
grep "^#" "$dest/bench.txt" | grep clusters
