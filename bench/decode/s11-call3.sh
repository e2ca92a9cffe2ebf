#!/usr/bin/env bash
# Session 11, call 3 (call 2: the cluster's multicast copies read 2.2–2.9 TB/s, lost). Two ways to lose the
# combine's 5% at B=64 K=1, same run as the loader ceiling:
# - row groups (.r2): two CTAs a key range, each 16 of the 32 query rows, each reading the whole range (the
#   second read should hit the L2: `ceiling`'s splits1.dup2 says whether the L2 keeps up);
# - programmatic dependent launch (HARNESS_PDL=1): the combine (and the next step's kernel) start while the
#   kernel before them finishes, waiting in griddepcontrol.wait.
#   device: run(carry: [".wt-decode"], command: "cd .wt-decode && bash bench/decode/s11-call3.sh", timeout_s: 300)
set -u
dest=${OUT:-/tmp/out}
lib=tma1.4x32.s3f=
r2=tma1.8x16.s3f.r2,tma1.4x32.s3f.r2
HARNESS_ONLY=$r2 timeout -s KILL 60 ./bench/decode/harness check > "$dest/check.txt" 2>&1
echo "check r2 rc=$? $(tail -1 "$dest/check.txt")"
HARNESS_PDL=1 HARNESS_ONLY=$lib,$r2 timeout -s KILL 60 ./bench/decode/harness check >> "$dest/check.txt" 2>&1
echo "check pdl rc=$? $(tail -1 "$dest/check.txt")"
HARNESS_PDL=1 HARNESS_ONLY=$lib,tma1.8x16.s3f.r2= timeout -s KILL 120 compute-sanitizer --tool racecheck \
  ./bench/decode/harness check quick > "$dest/racecheck.txt" 2>&1
echo "racecheck rc=$? $(grep -E "RACECHECK SUMMARY|check:" "$dest/racecheck.txt" | tr '\n' ' ')"
HARNESS_L2=none timeout -s KILL 60 ./bench/decode/harness ceiling > "$dest/ceiling.txt" 2>&1
echo "ceiling rc=$?"
shapes=64:16384:1,128:8192:1,8:131072:1,1:32768:1
for pdl in 0 1; do
  HARNESS_PDL=$pdl HARNESS_ONLY=$lib,$r2 HARNESS_L2=none HARNESS_SPLITS=1,2,4 HARNESS_SHAPES=$shapes \
    timeout -s KILL 90 ./bench/decode/harness bench > "$dest/bench-pdl$pdl.txt" 2>&1
  echo "bench pdl=$pdl rc=$?"
done
grep "^FAIL" "$dest/check.txt" | head -5
grep -E "^(64|128) " "$dest/ceiling.txt" | grep -E "tma +splits"
for pdl in 0 1; do
  echo "== pdl $pdl"
  grep -E "^(64|128|8|1) " "$dest/bench-pdl$pdl.txt" | grep -E " tma1" | awk '{print $1, $2, $4, $5, $7, $9}'
done
