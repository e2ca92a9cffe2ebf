#!/usr/bin/env bash
# Session 6's last GPU call (lead), on the final main: the whole GPU suite (scripts/gpu-verify.sh), then,
# alone on the GPU, the benches whose same-run peer numbers the README and the issues cite:
#   1. the Hopper kernel's headline shape, T sweep and GQA beside attnlab cudnn and PyTorch (s6-bench.ts);
#   2. decoding on the library path, flash and cudnn, dense and paged, beside PyTorch (decode-bench.ts);
#   3. `attnlab lab --quick` (every section, lab.json + lab.html).
# From the project root, .device carried:
#   bash .device/on-gpu.sh bash bench/results/2026-12-01-s6-final/run.sh "$OUT"
set -u
out=${1:?output folder}
py=/opt/torch/.venv/bin/python
mkdir -p "$out/verify" /tmp/final-logs
# Trials beside the suite, not on main: .wt-lean = main + bench/flash-backward/wgmma-lean.patch (the wgmma
# backward loop with flag-gated Q/dO clean-up and stmatrix dS), and cuDNN's unified paged graph (opt-in).
trial() { # name, dir, "VAR=value ...", node --test arguments...
  local name=$1 dir=$2 vars=$3; shift 3
  ( cd "$dir" && env $vars timeout --kill-after=5 150 node --import tsx --test --test-reporter=tap "$@" \
      > /tmp/final-logs/$name.tap 2>&1; echo "rc=$?" >> /tmp/final-logs/$name.tap ) &
}
W="ATTNLAB_FLASH_BWD_KERNEL=wgmma ATTNLAB_CACHE_DIR=/tmp/lean-cache"
if [ -d .wt-lean ]; then
  trial lean-flash-backward .wt-lean "$W" test/gpu/flash-backward.test.ts
  trial lean-backward-flash .wt-lean "$W" --test-name-pattern='· flash$' test/gpu/backward.test.ts
  trial lean-backward-more .wt-lean "$W" --test-name-pattern='· flash (long|deterministic|random deterministic)$' \
    test/gpu/backward.test.ts
  ( cd .wt-lean && env $W timeout --kill-after=5 150 compute-sanitizer --tool memcheck --error-exitcode 9 --print-limit 10 \
      node --import tsx --test --test-reporter=tap --test-name-pattern=sanitize test/gpu/flash-backward.test.ts \
      > /tmp/final-logs/lean-memcheck.san 2>&1; echo "rc=$?" >> /tmp/final-logs/lean-memcheck.san ) &
fi
trial unified-paged . "ATTNLAB_CUDNN_GRAPH=unified ATTNLAB_CACHE_DIR=/tmp/unified-cache" test/gpu/cudnn-paged.test.ts
bash scripts/gpu-verify.sh "$out/verify" 150 > /tmp/final-logs/verify.txt 2>&1
wait
echo "verify and trials done at ${SECONDS} s"
export ATTNLAB_CACHE_DIR=/tmp/attnlab-verify-cache NO_COLOR=1
export ATTNLAB_COMMIT=${ATTNLAB_COMMIT:-$(cat .device/commit 2>/dev/null || echo unknown)}
timeout --kill-after=5 180 node --import tsx bench/hopper/s6-bench.ts "$out/hopper-bench.json" \
  > /tmp/final-logs/hopper-bench.txt 2>&1
echo "hopper bench rc=$? at ${SECONDS} s"
timeout --kill-after=5 75 node --import tsx bench/decode/decode-bench.ts --out "$out/decode.json" --torch $py \
  --impl flash,cudnn > /tmp/final-logs/decode-bench.txt 2>&1
echo "decode bench rc=$? at ${SECONDS} s"
timeout --kill-after=5 70 node --import tsx src/cli/bin.ts lab --quick --out /tmp/final-lab \
  > /tmp/final-logs/lab.txt 2>&1
echo "lab rc=$? at ${SECONDS} s"
# The lean backward beside PyTorch's FA2 backward (same bench run), and main's wgmma loop timed alone.
if [ -d .wt-lean ]; then
  ( cd .wt-lean && env $W timeout -s KILL 55 node --import tsx src/cli/bin.ts bench --pass backward --batch 4 \
      --seq 8192 --heads 16 --head-dim 128 --dtype bfloat16 --causal false,true --repeats 10 --budget-ms 150 \
      --no-check --ceiling 800 --no-progress --impl flash --peers torch --name s6-lean-backward \
      --json "$out/lean-backward.json" ) > /tmp/final-logs/lean-bench.txt 2>&1
  echo "lean bench rc=$? at ${SECONDS} s"
fi
env ATTNLAB_FLASH_BWD_KERNEL=wgmma timeout -s KILL 30 node --import tsx bench/flash-backward/variants.ts 4 8192 16 128 \
  mma wgmma > /tmp/final-logs/main-variants.txt 2>&1
echo "main variants rc=$? at ${SECONDS} s"
cp /tmp/final-lab/lab.json /tmp/final-lab/lab.html /tmp/final-logs/ 2>/dev/null
tar -C /tmp/final-logs -cf - . | xz -T8 -6 > "$out/logs.tar.xz"
sed -n '/== summary/,$p' /tmp/final-logs/verify.txt
tail -30 /tmp/final-logs/hopper-bench.txt
tail -16 /tmp/final-logs/decode-bench.txt
tail -3 /tmp/final-logs/lab.txt
echo "== trials"
for f in /tmp/final-logs/*.tap /tmp/final-logs/*.san; do
  printf '%-22s %s %s %s\n' "$(basename "$f")" "$(grep -E '^# (pass|fail|skipped)' "$f" | awk '{printf "%s=%s ", $2, $3}')" \
    "$(grep -hE 'ERROR SUMMARY' "$f" | tr '\n' ' ')" "$(tail -1 "$f")"
done
grep -hE '^\s*not ok' /tmp/final-logs/*.tap /tmp/final-logs/*.san | head -10
grep -hE "TFLOP|flash|torch" /tmp/final-logs/lean-bench.txt | tail -8
grep -E "causal=|Error" /tmp/final-logs/main-variants.txt | head -6
