#!/usr/bin/env bash
# Session 19, call 2. V through registers in the library's TMA decode kernel (decodeTuning.stagedWarps: 4 or 8 producer
# warps load each tile's V rows and store them into the stage while K stays on tensor copies; call 1's reader read
# scattered 4 KiB pages at 4189–4201 GB/s that way against 3888 by the TMA engine alone).
# (A) correctness: the staged forms' shard (dense, pages 8…256, splits chosen/1/3/17, lengths 0 and 1, GQA, windows)
#     and their window case under memcheck, racecheck and synccheck; the rest of decode-tma.test.ts (NaN in V and K
#     with staged V too, fp16, merges, the decode loop) and the clustered form's shard, since tma_produce was refactored.
# (B) K=1 B=64 S=16k (1M tokens) dense / block 16 / block 64 through dist's decode-bench: the rule, staged V by 4 and 8
#     warps in the rule's form and forced into each form, the rule again.
#   bash .device/on-gpu.sh bash bench/s19/call2.sh "$OUT"   (.device, dist and .kcache carried)
# Ran at c755eeb: the staged-V kernel (decodeTuning.stagedWarps) was removed after call 5; check that tree out to rerun.
set -u
out=${1:?output folder}
. scripts/gpu-lib.sh
date -u
nvidia-smi --query-gpu=name,uuid,power.limit --format=csv,noheader
mkdir -p "$out/verify"
bash scripts/gpu-verify.sh "$out/verify" 170 'decode-tma-st$|^decode-tma$|^decode-tma-mc$' 2>&1 | tail -12
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
