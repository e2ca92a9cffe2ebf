#!/usr/bin/env bash
# Session 17, call 4: the load/store-path loader (decodeTuning.copies = 'lsu': two warps of 16-byte cp.async fill
# the TMA kernel's swizzled stages; no clusters). (A) bench/decode/read-ceiling.cu with its bare reader (lsu: the
# bulk reader's three 64 KiB stages a CTA filled by 4 or 8 warps of cp.async) beside the TMA bulk reader and plain
# loads; (B) K=1 at 1M tokens (B=64 S=16k, B=8 S=128k), dense / block 16 / block 64: the rule, lsu in one block
# (rowGroups 1), lsu in row groups (rowGroups 2), interleaved twice; (C) its GPU tests (decode-tma.test.ts,
# ', lsu copies in ') and the window case at 3 splits under memcheck, racecheck and synccheck.
#   bash .device/on-gpu.sh bash bench/s17/call4.sh "$OUT"   (.device, .kcache and dist carried)
set -u
out=${1:?output folder}
. scripts/gpu-lib.sh
export PATH=/usr/local/cuda/bin:$PATH
decode_call "$out"
nvidia-smi --query-gpu=name,uuid,power.limit --format=csv,noheader
timeout -s KILL 120 nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -o /tmp/read-ceiling \
  bench/decode/read-ceiling.cu > /tmp/read-ceiling.build.log 2>&1 || { echo "read-ceiling build failed"; cat /tmp/read-ceiling.build.log; }
timeout --kill-after=5 120 /tmp/read-ceiling 256 512 1024 > "$runs/read-ceiling.txt" 2>&1
echo "read-ceiling rc=$? at ${SECONDS} s"
shapes=64:16384:1,8:131072:1
for n in 1 2; do
  decode_run "rule-$n" 90 --torch none --impl flash --shapes $shapes
  decode_run "lsu1-$n" 90 --torch none --impl flash --shapes $shapes --tuning '{"copies":"lsu","rowGroups":1}'
  decode_run "lsu2-$n" 90 --torch none --impl flash --shapes $shapes --tuning '{"copies":"lsu","rowGroups":2}'
done
decode_end
cp "$runs/read-ceiling.txt" "$out/"
grep -E '^#|512 MiB' "$runs/read-ceiling.txt" | grep -E '^#|lsu|ldg 4K|bulk 4K'
logs=$out/tests
mkdir -p "$logs"
cap=200
shard decode-tma-lsu - --test-name-pattern=', lsu copies in ' test/gpu/decode-tma.test.ts
for tool in memcheck racecheck synccheck; do
  sanitize "$tool-lsu" "$tool" --test-name-pattern='^window .*, lsu copies in [^,]*, 3 splits' test/gpu/decode-tma.test.ts
done
wait
echo "tests done at ${SECONDS} s"
summary 16 16 20
tar -C "$out" -cJf "$out/tests.tar.xz" tests && rm -rf "$logs"
call_save_cache "$out"
