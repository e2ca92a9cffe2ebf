#!/usr/bin/env bash
# Session 10's closing device call on main: session 9's prepared verification (bench/s9/final-verify.sh:
# the whole GPU suite at a 200 s cap a shard, the decode shapes of issue 16 beside PyTorch, `lab --quick`),
# then, where the decode worktree's harness is carried as .wt-decode, its loader ceiling
# (bench/decode/s10-call5.sh: TMA vs bulk copies, library vs persistent grids; ~10 s).
#   bash .device/on-gpu.sh bash bench/s10/final-verify.sh "$OUT"   (.device, .kcache[, .wt-decode] carried)
set -u
out=${1:?output folder}
bash bench/s9/final-verify.sh "$out"
if [ -x .wt-decode/bench/decode/harness ]; then
  (cd .wt-decode && OUT="$out" bash bench/decode/s10-call5.sh)
fi
