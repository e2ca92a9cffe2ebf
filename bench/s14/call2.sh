#!/usr/bin/env bash
# Session 14, call 2 (bench only, dist/ carried): programmatic dependent launches, interleaved A/B in separate
# processes, twice: ATTNLAB_DEPENDENT_LAUNCH unset (plain), =splits (the split kernel and its combine where the keys
# are split), =1 (every TMA launch), =combine; at K=1 B=64 S=16k (row groups dense/64, one block and two splits at
# block 16), K=1 B=64 S=64k (one block, two splits), K=4 B=8 S=128k (four splits), K=1 B=1 S=32k (row groups,
# many splits). Call 1 saw block 16 at 1M read 3772 plain, 3868 with =1, 3814 with =combine, one process each.
# Then the one-block form's boxes at block 16 (groups of 8, the rule, against half boxes: call 1 3772 / 3850), and
# bench/decode/fixed-cost.ts with the kernels timed alone (call 1 fitted host-bound per-call times).
#   bash .device/on-gpu.sh bash bench/s14/call2.sh "$OUT"   (.device, .kcache and dist carried)
set -u
. scripts/gpu-lib.sh
decode_call "${1:?output folder}"
shapes=64:16384:1,64:65536:1,8:131072:4,1:32768:1
for n in 1 2; do
  for mode in 0 splits 1 combine; do
    ATTNLAB_DEPENDENT_LAUNCH=$mode decode_run "pdl-$mode-$n" 60 --torch none --impl flash --no-kernels-alone --shapes $shapes
  done
done
for n in 1 2; do
  for g in 8 0; do
    decode_run "box$g-$n" 40 --torch none --impl flash --no-kernels-alone --shapes 64:16384:1,128:8192:1 --layouts paged16 \
      --tuning "{\"boxGroup\":$g}"
  done
done
timeout --kill-after=5 90 node dist/bench/decode/fixed-cost.js --out "$runs/fixed.json" --shape 64:16384:1 > "$runs/fixed.log" 2>&1
echo "fixed rc=$? at ${SECONDS} s"
decode_end
grep -h "fixed\|L=" "$runs"/fixed.log
