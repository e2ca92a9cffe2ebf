#!/usr/bin/env bash
# Session 17, call 5 (call 4 never got a machine; ~590 s of device time left): in one call, (A) read-ceiling's
# load/store-path reader at 256 and 512 MiB, (B) K=1 B=64 S=16k dense / block 16 / block 64: the rule, the
# load/store-path loader in one block and in row groups (decodeTuning.copies = 'lsu'), (C) every decode shard and
# sanitizer run of the GPU suite (scripts/gpu-verify.sh 200 decode: this session changed nothing else since the whole
# suite's last run, session 16 call 4, but gpu-power, which call 1 ran; the lsu forms in a shard of their own, their
# window case under memcheck, racecheck and synccheck).
#   bash .device/on-gpu.sh bash bench/s17/call5.sh "$OUT"   (.device, .kcache and dist carried)
set -u
out=${1:?output folder}
. scripts/gpu-lib.sh
export PATH=/usr/local/cuda/bin:$PATH
decode_call "$out"
nvidia-smi --query-gpu=name,uuid,power.limit --format=csv,noheader
timeout -s KILL 100 nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -o /tmp/read-ceiling \
  bench/decode/read-ceiling.cu > /tmp/read-ceiling.build.log 2>&1 || { echo "read-ceiling build failed"; cat /tmp/read-ceiling.build.log; }
timeout --kill-after=5 60 /tmp/read-ceiling 256 512 > "$runs/read-ceiling.txt" 2>&1
echo "read-ceiling rc=$? at ${SECONDS} s"
k1=64:16384:1
decode_run rule 60 --torch none --impl flash --shapes $k1
decode_run lsu1 90 --torch none --impl flash --shapes $k1 --tuning '{"copies":"lsu","rowGroups":1}'
decode_run lsu2 90 --torch none --impl flash --shapes $k1 --tuning '{"copies":"lsu","rowGroups":2}'
decode_run rule-2 60 --torch none --impl flash --shapes $k1
decode_end
cp "$runs/read-ceiling.txt" "$out/"
grep -E '512 MiB' "$runs/read-ceiling.txt" | grep -E 'lsu|ldg 4K|bulk 4K (in order|random) 128'
bash scripts/gpu-verify.sh "$out" 200 decode > "$out/verify-summary.txt" 2>&1
echo "verify done at ${SECONDS} s"
sed -n '/== summary/,$p' "$out/verify-summary.txt"
