#!/usr/bin/env bash
# Session 14, call 1 (bench only, dist/ carried): where K=1's 1M-token paged rows lose against dense (B=64 S=16k
# N=32 H=128 bf16; session 13: 4247–4260 dense, 3883–3914 block 16, 4093–4139 block 64 GB/s).
# (A) baseline with PyTorch and kernels alone; (B) the same pages in pool order (--table-order sequential);
# (C) the forms and boxes at block 16 (row groups with groups of 16 and 8, one block with groups of 16 / halves);
# (D) ATTNLAB_DEPENDENT_LAUNCH=combine and =1; (E) bench/decode/fixed-cost.ts per layout, default and one block;
# (F) K=8 then K=4 in one process with and without --empty-pool; (G) K=4 at B=8 S=128k and B=128 S=8k, flash,
# cuDNN and auto beside PyTorch (not re-run since session 12).
#   bash .device/on-gpu.sh bash bench/s14/call1.sh "$OUT"   (.device, .kcache and dist carried)
set -u
. scripts/gpu-lib.sh
decode_call "${1:?output folder}"
py=/opt/torch/.venv/bin/python
one=64:16384:1
decode_run base 60 --torch $py --impl flash --shapes $one
decode_run seq 40 --torch none --impl flash --no-kernels-alone --shapes $one --table-order sequential
decode_run rg2g16 40 --torch none --impl flash --no-kernels-alone --shapes $one --layouts paged16 --tuning '{"rowGroups":2}'
decode_run rg2g8 40 --torch none --impl flash --no-kernels-alone --shapes $one --layouts paged16 --tuning '{"rowGroups":2,"boxGroup":8}'
decode_run rg1g16 40 --torch none --impl flash --no-kernels-alone --shapes $one --layouts paged16 --tuning '{"boxGroup":16}'
decode_run rg1g0 40 --torch none --impl flash --no-kernels-alone --shapes $one --layouts paged16 --tuning '{"boxGroup":0}'
decode_run seqrg2 40 --torch none --impl flash --no-kernels-alone --shapes $one --layouts paged16 --table-order sequential --tuning '{"rowGroups":2}'
ATTNLAB_DEPENDENT_LAUNCH=combine decode_run pdlc 40 --torch none --impl flash --no-kernels-alone --shapes $one
ATTNLAB_DEPENDENT_LAUNCH=combine decode_run pdlcrg1 40 --torch none --impl flash --no-kernels-alone --shapes $one --layouts dense,paged64 --tuning '{"rowGroups":1}'
ATTNLAB_DEPENDENT_LAUNCH=1 decode_run pdl1 40 --torch none --impl flash --no-kernels-alone --shapes $one --layouts paged16
echo "fixed-cost"
for t in default rg1; do
  tuning='{}'; [ $t = rg1 ] && tuning='{"rowGroups":1}'
  timeout --kill-after=5 60 node dist/bench/decode/fixed-cost.js --out "$runs/fixed-$t.json" --shape $one \
    --tuning "$tuning" > "$runs/fixed-$t.log" 2>&1
  echo "fixed-$t rc=$? at ${SECONDS} s"
done
decode_run pool 60 --torch none --impl flash --no-kernels-alone --shapes 64:16384:8,64:16384:4
decode_run emptypool 60 --torch none --impl flash --no-kernels-alone --shapes 64:16384:8,64:16384:4 --empty-pool
decode_run k4 150 --torch $py --impl flash,cudnn,auto --no-kernels-alone --table-room --shapes 8:131072:4,128:8192:4
decode_end
grep -h "fixed\|L=" "$runs"/fixed-*.log
