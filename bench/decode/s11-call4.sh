#!/usr/bin/env bash
# Session 11, call 4: row groups (.r2) with grouped boxes (.g8/.g16/.g32/.g64: one copy moves both 128-byte
# halves of that many rows), against the library's kernel and its grouped forms, every launch a programmatic
# dependent (HARNESS_PDL=1; call 3: +1–3% at B=64, +8% at B=1). Harness only.
#   device: run(carry: [".wt-decode"], command: "cd .wt-decode && bash bench/decode/s11-call4.sh", timeout_s: 300)
set -u
dest=${OUT:-/tmp/out}
r2=tma1.8x16.s3f.g8.r2,tma1.8x16.s3f.g16.r2,tma1.8x16.s3f.g32.r2,tma1.8x16.s3f.g64.r2
lib=tma1.4x32.s3f=,tma1.4x32.s3f.g8=,tma1.4x32.s3f.g16=,tma1.4x32.s3f.g32=,tma1.4x32.s3f.g64=,tma1.8x16.s3f.r2=
HARNESS_PDL=1 HARNESS_ONLY=$r2 timeout -s KILL 90 ./bench/decode/harness check > "$dest/check.txt" 2>&1
echo "check rc=$? $(tail -1 "$dest/check.txt")"
HARNESS_PDL=1 HARNESS_ONLY=tma1.8x16.s3f.g16.r2= timeout -s KILL 120 compute-sanitizer --tool racecheck \
  ./bench/decode/harness check quick > "$dest/racecheck.txt" 2>&1
echo "racecheck rc=$? $(grep -E "RACECHECK SUMMARY|check:" "$dest/racecheck.txt" | tr '\n' ' ')"
HARNESS_PDL=1 HARNESS_ONLY=$lib,$r2,tma1.8x16.s3f.g16.r2.lo2 HARNESS_L2=none HARNESS_SPLITS=1,2 \
  HARNESS_SHAPES=64:16384:1,128:8192:1,8:131072:1,1:32768:1 \
  timeout -s KILL 120 ./bench/decode/harness bench > "$dest/bench.txt" 2>&1
echo "bench rc=$?"
grep "^FAIL" "$dest/check.txt" | head -5
grep -E "^(64|128|8|1) " "$dest/bench.txt" | grep -E " tma1" | awk '{print $1, $2, $4, $5, $7, $9}'
