#!/usr/bin/env bash
# Session 17, call 1 (cold: no kernel cache carried). (A) The GPU tests not run since session 16's last GPU change:
# test/gpu/gpu-power.test.ts (windows under 250 ms get no reading, 581c8de), and the new L2-prefetch forms of the TMA
# decode kernel (decode-tma.test.ts, ', prefetching ': one block with 1 tile ahead, clustered row groups with 2).
# (B) K=1 B=64 S=16k dense / block 16 / block 64, interleaved twice: the rule; the producer's L2 prefetch 1 and 2
# tiles ahead (decodeTuning.prefetch); every launch a programmatic dependent (ATTNLAB_DEPENDENT_LAUNCH=1, session
# 14: −13% for one-split row groups when the pair were independent blocks; now 16- and 64-row pages run clusters).
#   bash .device/on-gpu.sh bash bench/s17/call1.sh "$OUT"   (.device and dist carried)
set -u
out=${1:?output folder}
. scripts/gpu-lib.sh
cap=200
call_start "$out" /tmp/attnlab-decode-cache
shard gpu-power - test/gpu/gpu-power.test.ts
shard decode-tma-pf - --test-name-pattern=', prefetching ' test/gpu/decode-tma.test.ts
wait
echo "tests done at ${SECONDS} s"
summary 16 16 20
tar -C "$out" -cJf "$out/tests.tar.xz" tests && rm -rf "$logs"
SMI_MS=100 decode_call "$out"
k1=64:16384:1
for n in 1 2; do
  decode_run "rule-$n" 60 --torch none --impl flash --shapes $k1
  decode_run "pf1-$n" 60 --torch none --impl flash --shapes $k1 --tuning '{"prefetch":1}'
  decode_run "pf2-$n" 60 --torch none --impl flash --shapes $k1 --tuning '{"prefetch":2}'
  ATTNLAB_DEPENDENT_LAUNCH=1 decode_run "dl-$n" 60 --torch none --impl flash --shapes $k1
done
decode_end
call_save_cache "$out"
echo "done at ${SECONDS} s"
