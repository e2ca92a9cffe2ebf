#!/usr/bin/env bash
# Session 13's verification call on main: the whole GPU suite (scripts/gpu-verify.sh, 240 s a shard; new: the TMA
# kernel merging its own splits, under memcheck and synccheck too), then alone on the GPU the TMA kernel's splits
# merged in the split kernel against the combine kernel, same run (decodeTuning.combine), at the shapes where the
# library runs 2–4 splits, then issue 16's rows beside PyTorch at B=64 S=16k K=8 and K=1, then `lab --quick`.
#   bash .device/on-gpu.sh bash bench/s13/final-verify.sh "$OUT"   (.device and .kcache carried)
set -u
out=${1:?output folder}
L=/tmp/final-verify-logs
mkdir -p "$out/verify" $L
bash scripts/gpu-verify.sh "$out/verify" 240 > $L/verify.txt 2>&1
echo "verify done at ${SECONDS} s"
export ATTNLAB_CACHE_DIR=/tmp/attnlab-verify-cache NO_COLOR=1
export ATTNLAB_COMMIT=${ATTNLAB_COMMIT:-$(cat .device/commit 2>/dev/null || echo unknown)}
bench() { # name, cap, decode-bench arguments
  local name=$1 cap=$2
  shift 2
  timeout --kill-after=5 "$cap" node --import tsx bench/decode/decode-bench.ts --out $L/$name.json --no-uncached \
    --table-room "$@" 2>&1 | grep -v "UserWarning\|call = lambda" > $L/$name.txt
  echo "$name rc=${PIPESTATUS[0]} at ${SECONDS} s"
}
splits=64:16384:1,8:131072:8,8:131072:4,64:65536:1
bench fused 80 --torch none --impl flash --no-kernels-alone --shapes $splits
bench kernel 80 --torch none --impl flash --no-kernels-alone --tuning '{"combine":"kernel"}' --shapes $splits
bench peers 100 --torch /opt/torch/.venv/bin/python --impl flash,cudnn,auto --no-kernels-alone \
  --shapes 64:16384:8,64:16384:1
timeout --kill-after=5 90 node --import tsx src/cli/bin.ts lab --quick --out /tmp/final-verify-lab > $L/lab.txt 2>&1
echo "lab rc=$? at ${SECONDS} s"
cp /tmp/final-verify-lab/lab.json /tmp/final-verify-lab/lab.html $L/ 2>/dev/null
mv "$out/verify/kernels.tar.xz" "$out/kernels.tar.xz" 2>/dev/null
cp "$out/verify/logs.tar.xz" $L/verify-logs.tar.xz 2>/dev/null
rm -rf "$out/verify"
python3 bench/s12/table.py $L > $L/table.txt
tar -C $L -cf - . | xz -T8 -6 > "$out/logs.tar.xz"
sed -n '/== summary/,$p' $L/verify.txt
grep -v efficien $L/table.txt
tail -4 $L/lab.txt
