#!/usr/bin/env bash
# Session 16, call 1 (main at session 15's end): (A) the NVML power state's first GPU run — test/gpu/gpu-power.test.ts,
# `attnlab info`'s power limit, decode-bench rows' `power`; (B) K=1 at block 16, the one-block form's boxes (groups
# of 8, the rule; half boxes; groups of 16) and row groups (forced), interleaved, two runs each; K=1 dense / block 64
# beside them.
#   bash .device/on-gpu.sh bash bench/s16/call1.sh "$OUT"   (.device, .kcache and dist carried)
set -u
out=${1:?output folder}
. scripts/gpu-lib.sh
logs=$out/tests cap=120
mkdir -p "$logs"
export NO_COLOR=1
date -u; nvidia-smi --query-gpu=name,uuid,power.limit --format=csv,noheader
shard gpu-power - test/gpu/gpu-power.test.ts
wait
timeout 60 node dist/src/cli/bin.js info > "$logs/info.txt" 2>&1; echo "info rc=$?" >> "$logs/info.txt"
summary 12 12 10
grep -i power "$logs/info.txt"
grep -E '^# Subtest|^not ok|^ok|Error|error' "$logs/gpu-power.tap" | head -20
tar -C "$out" -cJf "$out/tests.tar.xz" tests && rm -rf "$logs"
SMI_MS=100 decode_call "$out"
k1=64:16384:1,128:8192:1
decode_run base 60 --torch none --impl flash --shapes 64:16384:1
for n in 1 2; do
  decode_run "g8-$n" 40 --torch none --impl flash --layouts paged16 --shapes $k1
  decode_run "g0-$n" 40 --torch none --impl flash --layouts paged16 --shapes $k1 --tuning '{"boxGroup":0}'
  decode_run "g16-$n" 40 --torch none --impl flash --layouts paged16 --shapes $k1 --tuning '{"boxGroup":16}'
  decode_run "rg-$n" 40 --torch none --impl flash --layouts paged16 --shapes $k1 --tuning '{"rowGroups":2}'
done
decode_end
grep -h '"power"' -A4 "$runs/base.json" | head -12
echo "done at ${SECONDS} s"
