#!/usr/bin/env bash
# Session 20, call 4. (1) The whole GPU suite at this tree (scripts/gpu-verify.sh): lengths and offsets as int32
# tensors (d2dbdaa, a new decode.test.ts case on device tensors), the paged/packed validation changes (d701848) and
# decode rows in GB/s (88e8d1f) are new since call 3. (2) `attnlab bench` on dense decode steps through dist/, with
# PyTorch's SDPA in the same run: the README's example command, whose rows now carry GB/s and % of the HBM peak.
#   bash bench/s20/call4.sh "$OUT"   (.device, dist and .kcache carried)
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
timeout -s KILL 200 node bin/attnlab.js bench --batch 64 --seq 1 --kv-seq 16384 --heads 32 --kv-heads 8,1 \
  --head-dim 128 --impl flash,cudnn --peers torch --no-progress --out "$out/bench" --name decode-steps \
  > "$out/bench.txt" 2>&1
echo "bench rc=$? at ${SECONDS} s"
tail -48 "$out/verify.txt" | grep -v "^\(memcheck\|racecheck\|synccheck\)"
grep -c "ERROR SUMMARY: 0 errors\|0 hazards displayed" "$out/verify.txt"
sed -n '/rows$/,/^$/p' "$out/bench.txt" | head -40
