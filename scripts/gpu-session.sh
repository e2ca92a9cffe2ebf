#!/usr/bin/env bash
# One GPU-machine session of checks and measurements, run through .device/on-gpu.sh:
#   bash .device/on-gpu.sh bash scripts/gpu-session.sh "$OUT"
# Steps run in order of importance, each under its own time limit, so that a slow step cannot eat the
# others; every log goes to the output folder and a short table is printed last.
set -u
out=${1:?usage: gpu-session.sh <output folder>}
mkdir -p "$out/results"
export ATTNLAB_CACHE_DIR=/tmp/attnlab-cache
# No .git travels to the GPU machine: results name the commit that pack-device.sh recorded.
export ATTNLAB_COMMIT=${ATTNLAB_COMMIT:-$(cat .device/commit 2>/dev/null || echo unknown)}
cli=(node --import tsx src/cli/bin.ts)
declare -a summary
step() { # step <name> <seconds> <command...>
  local name=$1 limit=$2; shift 2
  local start=$SECONDS
  timeout --kill-after=5 "$limit" "$@" > "$out/$name.log" 2>&1
  local rc=$?
  summary+=("$(printf '%-14s rc=%-3s %4ss' "$name" "$rc" "$((SECONDS - start))")")
}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$out/machine.log" 2>&1
"${cli[@]}" info >> "$out/machine.log" 2>&1
step tests 150 node --import tsx --test --test-reporter=tap test/gpu/*.test.ts
# The peers' large shapes take most of a step (each peer starts its framework and times several
# backends), so they run at H=128 only; H=64 and H=256 are measured for attnlab alone.
step bench-h128 150 "${cli[@]}" bench --batch 4 --seq 8192 --heads 16 --head-dim 128 --causal false,true \
  --impl flash,cudnn --peers jax,torch --repeats 30 --budget-ms 250 --no-progress \
  --name h200-big-h128 --out "$out/results"
step bench-h64-256 50 "${cli[@]}" bench --batch 4 --seq 8192 --heads 16 --head-dim 64,256 --causal false,true \
  --impl flash,cudnn --repeats 30 --budget-ms 250 --no-progress --name h200-big-h64-h256 --out "$out/results"
step bench-codelab 90 "${cli[@]}" bench --preset codelab --peers jax,torch --budget-ms 150 --no-progress \
  --name h200-codelab --out "$out/results"
step fp8 60 node --import tsx src/te/fp8-bench.ts "$out/results/te-fp8.json"
step lab 70 "${cli[@]}" lab --budget-ms 100 --out "$out/results"
grep -E '^# (tests|pass|fail|skipped)' "$out/tests.log" > "$out/tests-summary.txt" 2>/dev/null
tar -C "$out" -czf "$out/results.tgz" results && rm -rf "$out/results"
printf '%s\n' "${summary[@]}"
cat "$out/tests-summary.txt" 2>/dev/null
