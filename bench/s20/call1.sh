#!/usr/bin/env bash
# Session 20, call 1. (1) bench/decode/read-ceiling.cu --in-flight after 9f6f22b moved its loop over sizes and
# chunk orders into each_chunk_order (compiled, not run on a GPU since): the same rows as session 17's call 6 and
# session 19's call 1 should come out. (2) The whole GPU suite at this tree (scripts/gpu-verify.sh), which holds the
# host-hidden timer test's least-of-three change (2cc7e40) that no GPU has run.
#   bash bench/s20/call1.sh "$OUT"   (.device, dist and .kcache carried)
set -u
out=${1:?output folder}
. scripts/gpu-lib.sh
date -u
nvidia-smi --query-gpu=name,uuid,power.limit,clocks.max.sm --format=csv,noheader
export PATH=/usr/local/cuda/bin:$PATH
[ "${2:-}" = verify-only ] || {
read_ceiling_build "$out/read-ceiling.build.log"
timeout -s KILL 110 /tmp/read-ceiling --in-flight > "$out/in-flight.txt" 2>&1
echo "in-flight rc=$? at ${SECONDS} s"
}
mkdir -p "$out/v"
bash scripts/gpu-verify.sh "$out/v" 270 > "$out/verify.txt" 2>&1
echo "verify rc=$? at ${SECONDS} s"
tail -45 "$out/verify.txt"
[ -f "$out/in-flight.txt" ] && cut -c1-80 "$out/in-flight.txt"; true
