#!/usr/bin/env bash
# Session 20, call 5. (1) The whole GPU suite at this tree: attentionVjp now validates once and runs the forward
# through runAttention (80842a9; every backward test goes through it), and RingGroup's check (72ecd5c). (2) `attnlab lab
# --quick` through dist/: its decode section's rows and chart in GB/s (88e8d1f).
#   bash bench/s20/call5.sh "$OUT"   (.device, dist and .kcache carried)
set -u
out=${1:?output folder}
. scripts/gpu-lib.sh
date -u
nvidia-smi --query-gpu=name,uuid,power.limit,clocks.max.sm --format=csv,noheader
export PATH=/usr/local/cuda/bin:$PATH
mkdir -p "$out/v"
bash scripts/gpu-verify.sh "$out/v" 240 > "$out/verify.txt" 2>&1
echo "verify rc=$? at ${SECONDS} s"
export ATTNLAB_CACHE_DIR=/tmp/attnlab-verify-cache NO_COLOR=1
timeout -s KILL 240 node bin/attnlab.js lab --quick --out "$out/lab" > "$out/lab.txt" 2>&1
echo "lab rc=$? at ${SECONDS} s"
tail -48 "$out/verify.txt" | grep -v "^\(memcheck\|racecheck\|synccheck\)"
grep -c "ERROR SUMMARY: 0 errors\|0 hazards displayed" "$out/verify.txt"
grep -n -A14 "Decode step by KV heads" "$out/lab.txt" | head -30
