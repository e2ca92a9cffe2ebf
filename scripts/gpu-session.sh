#!/usr/bin/env bash
# One GPU-machine session of checks and measurements, run through .device/on-gpu.sh:
#   bash .device/on-gpu.sh bash scripts/gpu-session.sh "$OUT" [step ...]
# With no steps named, runs the full session (tests bench-h128 bench-h64-256 bench-codelab fp8 lab).
# Steps run in the order given, each under its own time limit, so that a slow step cannot eat the
# others; every log goes to the output folder, the GPU's clocks, power and temperature are sampled
# throughout (smi.csv), and a short table is printed last.
set -u
out=${1:?usage: gpu-session.sh <output folder> [step ...]}
shift
steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(tests bench-h128 bench-h64-256 bench-codelab fp8 lab)
mkdir -p "$out/results"
export ATTNLAB_CACHE_DIR=/tmp/attnlab-cache
# No .git travels to the GPU machine: results name the commit that pack-device.sh recorded.
export ATTNLAB_COMMIT=${ATTNLAB_COMMIT:-$(cat .device/commit 2>/dev/null || echo unknown)}
cli=(node --import tsx src/cli/bin.ts)
big=(--batch 4 --seq 8192 --heads 16 --causal false,true --repeats 30 --budget-ms 250 --no-progress)
H64=${H64:-4 8192 16 64}
declare -a summary
python_with() { # the first Python that imports $1
  for p in python3 /opt/torch/.venv/bin/python /opt/*/.venv/bin/python; do
    "$p" -c "import $1" 2>/dev/null && { echo "$p"; return; }
  done
}
step() { # step <name> <seconds> <command...>
  local name=$1 limit=$2; shift 2
  local start=$SECONDS
  timeout --kill-after=5 "$limit" "$@" > "$out/$name.log" 2>&1
  local rc=$?
  summary+=("$(printf '%-16s rc=%-3s %4ss' "$name" "$rc" "$((SECONDS - start))")")
}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$out/machine.log" 2>&1
"${cli[@]}" info >> "$out/machine.log" 2>&1
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active \
  --format=csv -lms 500 > "$out/smi.csv" 2>&1 &
smi=$!
for name in "${steps[@]}"; do
  case $name in
    tests) step tests 280 node --import tsx --test --test-reporter=tap test/gpu/*.test.ts ;;
    fp8-tests) step fp8-tests 60 node --import tsx --test --test-reporter=tap test/gpu/fp8.test.ts ;;
    decode-tests) step decode-tests 120 node --import tsx --test --test-reporter=tap test/gpu/decode.test.ts ;;
    # Decode bandwidth (issue 16): flash dense and paged (16, 64) beside PyTorch's SDPA backends.
    decode-bench) step decode-bench 240 node --import tsx bench/decode/decode-bench.ts --out "$out/results/decode.json" ;;
    flash-tests) step flash-tests 200 node --import tsx --test --test-reporter=tap test/gpu/flash.test.ts ;;
    # The peers' large shapes take most of a step (each peer starts its framework and times several
    # backends), so they run at H=128 only; H=64 and H=256 are measured for attnlab alone.
    bench-h128) step bench-h128 150 "${cli[@]}" bench "${big[@]}" --head-dim 128 --impl flash,cudnn \
      --peers jax,torch --name h200-big-h128 --out "$out/results" ;;
    cudnn-h128) step cudnn-h128 100 "${cli[@]}" bench "${big[@]}" --head-dim 128 --impl cudnn \
      --peers jax,torch --name h200-cudnn-h128 --out "$out/results" ;;
    # H=64 and H=256 against PyTorch's FlashAttention-2 in the same run (issue 4 asks for both).
    flash-peers-h64-256) step flash-peers-h64-256 200 "${cli[@]}" bench "${big[@]}" --head-dim 64,256 \
      --impl flash --peers torch --name h200-flash-h64-h256-vs-torch --out "$out/results" ;;
    # Tile configurations beside the table's, through ATTNLAB_FLASH_TILES (bench/notes/flash-kernel.md).
    flash-tiles) step flash-tiles 240 bash -c "for c in 256:128x128x8 256:128x64x8s2 256:128x32x8 256:128x32x8s2 \
      64:128x64x4 64:64x64x4 64:64x64x4s2 64:128x64x8; do h=\${c%%:*}; t=\${c#*:}; \
      ATTNLAB_FLASH_TILES=\$t ${cli[*]} bench ${big[*]} --head-dim \$h --impl flash \
      --name flash-tiles-h\$h-\$t --out '$out/results' | grep -E 'attnlab flash' | head -2 | sed \"s/^/\$c /\"; done" ;;
    flash-carveout) step flash-carveout 240 bash -c "for c in 256:128x128x8 256:64x64x4 256:64x32x4 \
      128:128x64x4 64:128x64x4; do h=\${c%%:*}; t=\${c#*:}; \
      ATTNLAB_FLASH_TILES=\$t ${cli[*]} bench ${big[*]} --head-dim \$h --impl flash \
      --name flash-carveout-h\$h-\$t --out '$out/results' > /dev/null; done" ;;
    bench-h64-256) step bench-h64-256 50 "${cli[@]}" bench "${big[@]}" --head-dim 64,256 --impl flash,cudnn \
      --name h200-big-h64-h256 --out "$out/results" ;;
    # The two-stage K/V tiles, reachable only through ATTNLAB_FLASH_TILES (not in the table yet).
    flash-s2) step flash-s2 90 bash -c "ATTNLAB_FLASH_TILES=128x64x4s2 ${cli[*]} bench ${big[*]} \
      --head-dim 64,128 --impl flash --name h200-flash-s2-h64-h128 --out '$out/results' && \
      ATTNLAB_FLASH_TILES=128x64x8s2 ${cli[*]} bench ${big[*]} --head-dim 256 --impl flash \
      --name h200-flash-s2-h256 --out '$out/results'" ;;
    bench-codelab) step bench-codelab 130 "${cli[@]}" bench --preset codelab --peers jax,torch --budget-ms 150 \
      --no-progress --name h200-codelab --out "$out/results" ;;
    small) step small 60 "${cli[@]}" bench --batch 4 --seq 128 --heads 8 --head-dim 64 --causal false,true \
      --impl cudnn,flash --peers jax,torch --no-progress --name h200-small --out "$out/results" ;;
    fp8) step fp8 90 node --import tsx bench/te/fp8-bench.ts "$out/results/te-fp8.json" ;;
    cudnn-bench) step cudnn-bench 150 node --import tsx bench/cudnn/cudnn-bench.ts "$out/results/cudnn-vs-peers.json" ;;
    cudnn-probe) step cudnn-probe 120 node --import tsx bench/cudnn/cudnn-probe.ts "$out/results/cudnn-probe" ;;
    lab) step lab 100 "${cli[@]}" lab --budget-ms 100 --out "$out/results" ;;
    engines) step engines 120 node --import tsx bench/experiments/cudnn-engines.ts engines ;;
    knobs-fp8) step knobs-fp8 180 node --import tsx bench/experiments/cudnn-knobs.ts fp8 ;;
    knobs-bf16) step knobs-bf16 180 node --import tsx bench/experiments/cudnn-knobs.ts bf16 ;;
    fp8-overlap) step fp8-overlap 90 node --import tsx bench/experiments/fp8-overlap.ts ;;
    fp8-output) step fp8-output 60 node --import tsx bench/experiments/cudnn-engines.ts fp8-output ;;
    fp8-layouts) step fp8-layouts 90 node --import tsx bench/experiments/cudnn-engines.ts fp8-layouts ;;
    # Issue 12 §5 (why JAX's cuDNN attention beat attnlab's at H=64): the shape timed three ways by
    # each library (bench/experiments/cudnn-peers-probe.py, cudnn-regimes.ts) under cuDNN's API log,
    # JAX's HLO dump, the libcudnn each Python process mapped; then every KERNEL_CFG at H=64 and
    # attnlab on the system cuDNN. H64 is "B T N H".
    probe-jax|probe-torch) peer=${name#probe-}
      CUDNN_LOGLEVEL_DBG=3 CUDNN_LOGDEST_DBG="$out/$peer-cudnn.log" XLA_FLAGS="--xla_dump_to=$out/xla --xla_dump_hlo_as_text" \
        step "$name" 70 "$(python_with "$peer")" -c "import runpy, sys; p = 'bench/experiments/cudnn-peers-probe.py'; \
sys.argv = [p, '$peer', *'$H64'.split(), '20']; runpy.run_path(p, run_name='__main__'); \
print(*sorted({l.split()[-1] for l in open('/proc/self/maps') if 'libcudnn' in l}), sep='\n')" ;;
    probe-attnlab) CUDNN_LOGLEVEL_DBG=3 CUDNN_LOGDEST_DBG="$out/attnlab-cudnn.log" \
      step probe-attnlab 40 node --import tsx bench/experiments/cudnn-regimes.ts $H64 20 ;;
    probe-knobs) step probe-knobs 60 node --import tsx bench/experiments/cudnn-knobs.ts bf16 $H64 ;;
    probe-system-cudnn) ATTNLAB_CUDNN=/usr/lib/x86_64-linux-gnu/libcudnn.so.9 \
      step probe-system-cudnn 30 node --import tsx bench/experiments/cudnn-regimes.ts $H64 20 ;;
    # The cuDNN GPU tests of masks, expanded biases and rows that see no key.
    cudnn-mask-tests) step cudnn-mask-tests 70 node --import tsx --test --test-reporter=tap \
      --test-name-pattern='mask|bias \(|window \[|S_b|late keys|T>S|padding|probes' test/gpu/cudnn.test.ts ;;
    dispatch) step dispatch 40 bash -c "node --import tsx --cpu-prof --cpu-prof-dir '$out/results/prof' \
      bench/experiments/dispatch.ts cudnn 20000 && node --import tsx bench/experiments/dispatch.ts flash 20000" ;;
    *) summary+=("$(printf '%-16s unknown step' "$name")") ;;
  esac
done
kill "$smi" 2>/dev/null
grep -E '^# (tests|pass|fail|skipped)' "$out"/tests.log "$out"/*-tests.log > "$out/tests-summary.txt" 2>/dev/null
tar -C "$out" -czf "$out/results.tgz" results && rm -rf "$out/results"
printf '%s\n' "${summary[@]}"
cat "$out/tests-summary.txt" 2>/dev/null
for f in decode-bench engines fp8-output fp8-overlap fp8-layouts knobs-fp8 knobs-bf16 dispatch fp8; do
  if [ -f "$out/$f.log" ]; then echo "== $f"; tail -40 "$out/$f.log"; fi
done
exit 0
