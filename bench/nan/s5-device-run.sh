#!/bin/bash
# Issue 12 in one device call (session 5, engineer trust), run from the worktree copy through
# .device/on-gpu.sh, the main checkout one folder up:
#   1. GPU tests, two processes side by side: test/gpu/nan.test.ts (naive, cudnn and FP8: the
#      backends the repair serves; flash repairs inside its own kernel) and test/gpu/fp8.test.ts;
#   2. the NaN repair's cost (bench/nan/repair-cost.ts) on this tree, then its small part on the
#      main checkout's code (the repair before its caching);
#   3. §5 parity (bench/cudnn/parity-bench.ts): attnlab cudnn against JAX's and PyTorch's cuDNN at
#      H=64, 128, 256, causal and not, B=4 T=S=8192 N=16 bf16 (the default loader: the newest cuDNN
#      found), then attnlab alone on the system cuDNN 9.14, while the call is still inside its time.
# Logs under $OUT (at most 8 files come back); a short table last.
set -u
out=${OUT:-/tmp/s5-trust}
mkdir -p "$out"
export ATTNLAB_CACHE_DIR=/tmp/attnlab-cache NO_COLOR=1
summary="$out/summary.txt"
: > "$summary"
step() {
  local name=$1 limit=$2 log=$3; shift 3
  local started=$SECONDS
  timeout --kill-after=5 "$limit" "$@" >> "$out/$log" 2>&1
  local rc=$?
  printf '%-16s rc=%-3s %4ss (ends at %ss)\n' "$name" "$rc" "$((SECONDS - started))" "$SECONDS" >> "$summary"
}
# The main checkout's node_modules, for the timing of its code, unpacked while the tests run.
(cd .. && { [ -d node_modules ] || xz -dc .device/node_modules.tar.xz | tar -xf -; }) &

step nan-tests 80 nan-tests.log node --import tsx --test --test-reporter=tap \
  --test-name-pattern="naive|cudnn|FP8" test/gpu/nan.test.ts &
step fp8-tests 80 fp8-tests.log node --import tsx --test --test-reporter=tap test/gpu/fp8.test.ts &
wait

step repair-after 40 repair.log node --import tsx bench/nan/repair-cost.ts small,big,fp8
cp bench/nan/repair-cost.ts ../bench/nan/repair-cost-s5.ts
echo "main's nan-repair.ts: $(sha1sum ../src/backends/cuda/flash/nan-repair.ts)" >> "$summary"
echo "== before (main checkout)" >> "$out/repair.log"
(cd .. && step repair-before 30 repair.log node --import tsx bench/nan/repair-cost-s5.ts small)

step parity 150 bench.log node --import tsx bench/cudnn/parity-bench.ts "$out/parity.json" jax,torch
if [ "$SECONDS" -lt 125 ]; then
  ATTNLAB_CUDNN=/usr/lib/x86_64-linux-gnu/libcudnn.so.9 step parity-cudnn914 40 bench.log \
    node --import tsx bench/cudnn/parity-bench.ts "$out/parity-cudnn914.json" none
else
  echo "parity-cudnn914 not run: ${SECONDS}s used" >> "$summary"
fi

{
  echo "== tests"
  for f in nan-tests fp8-tests; do
    echo "$f: $(grep -E '^# (pass|fail|skipped)' "$out/$f.log" | tr '\n' ' ')"
    grep -E '^ *not ok' "$out/$f.log" | head -20
  done
  echo "== repair cost"
  grep -E '^(small|big|fp8|part) ' "$out/repair.log"
  echo "== parity"
  grep -E "^(attnlab's|H |64 |128 |256 )" "$out/bench.log"
} >> "$summary"
cat "$summary"
