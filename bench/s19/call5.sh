#!/usr/bin/env bash
# Session 19, call 5. V through registers again (decodeTuning.stagedWarps), with call 4's finding fixed: the first form
# spent ~1,800 instructions a tile and producer warp on two runtime divisions a load (call 2: 0.17–0.75× the rule);
# pages are now a shift and a mask, loads branch-free. (A) the staged forms' shard and their window case under
# memcheck, racecheck and synccheck; (B) K=1 B=64 S=16k dense / block 16 / block 64 through dist's decode-bench: the
# rule, V staged by 4 and 8 warps in the rule's form and forced into each form, the rule again.
#   bash .device/on-gpu.sh bash bench/s19/call5.sh "$OUT"   (.device, dist and .kcache carried)
# Ran at 90c2269: the staged-V kernel (decodeTuning.stagedWarps) was removed after call 5; check that tree out to rerun.
set -u
out=${1:?output folder}
. scripts/gpu-lib.sh
date -u
nvidia-smi --query-gpu=name,uuid,power.limit --format=csv,noheader
mkdir -p "$out/verify"
bash scripts/gpu-verify.sh "$out/verify" 170 'decode-tma-st$' 2>&1 | tail -12
echo "verify done at ${SECONDS} s"
SMI_MS=100 decode_call "$out"
cp -r /tmp/attnlab-verify-cache/kernels "$ATTNLAB_CACHE_DIR/" 2>/dev/null  # the staged variants, compiled above
k1=64:16384:1
decode_run rule-1 70 --torch none --impl flash --shapes $k1
decode_run st4 70 --torch none --impl flash --shapes $k1 --tuning '{"stagedWarps":4}'
decode_run st8 70 --torch none --impl flash --shapes $k1 --tuning '{"stagedWarps":8}'
decode_run st4-r2 70 --torch none --impl flash --shapes $k1 --tuning '{"stagedWarps":4,"rowGroups":2}'
decode_run st8-r2 70 --torch none --impl flash --shapes $k1 --tuning '{"stagedWarps":8,"rowGroups":2}'
decode_run st8-r1 70 --torch none --impl flash --shapes $k1 --tuning '{"stagedWarps":8,"rowGroups":1}'
decode_run rule-2 70 --torch none --impl flash --shapes $k1
decode_end
echo "done at ${SECONDS} s"
