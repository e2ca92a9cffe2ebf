#!/usr/bin/env bash
# Session 6, engineer hopper: one device call for the ping-pong / three-consumer Hopper kernel.
# Run from the worktree copy through .device/on-gpu.sh:
#   bash ../.device/on-gpu.sh bash bench/hopper/s6-session.sh "$OUT" <deadline s> [harness binary]
#   1. Correctness, all at once (one shared kernel cache, one process per shard): the library's GPU
#      files that reach the Hopper kernel (now the default on sm_90a) — flash-hopper by head dim,
#      flash.test by precision, nan, ring, backward's flash forward — racecheck and synccheck of the
#      library on the ping-pong (H=128) and three-consumer (H=64) kernels; the nvcc harness's checks
#      (every variant it times, against a float32 GPU reference) and its memcheck/racecheck/synccheck.
#   2. The harness timings, GPU alone: each variant beside the session-5 kernel.
#   3. bench/hopper/s6-bench.ts in the time left (attnlab flash, cudnn, PyTorch flash/cuDNN, mma.sync).
set -u
out=${1:?output folder}
deadline=${2:-190}
harness=${3:-bench/hopper/harness-bin}
logs=$out/logs
mkdir -p "$logs"
export NO_COLOR=1 ATTNLAB_CACHE_DIR=/tmp/attnlab-s6-cache ATTNLAB_COMMIT=${ATTNLAB_COMMIT:-unknown}
mkdir -p "$ATTNLAB_CACHE_DIR"
[ -f ../.kcache/kernels.tar.xz ] && tar -C "$ATTNLAB_CACHE_DIR" -xJf ../.kcache/kernels.tar.xz
cap=${TEST_CAP:-80}
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/gpu-lib.sh"  # shard, sanitize, summary (logs, cap)
hsan() { # harness under a sanitizer tool
  ( timeout --kill-after=5 $cap $san --tool "$1" --error-exitcode 9 --print-limit 20 "$harness" sanitize \
      > "$logs/harness-$1.san" 2>&1; echo "rc=$?" >> "$logs/harness-$1.san" ) &
}

for H in 64 128 256; do shard "hopper-h$H" - --test-name-pattern="^H=$H " test/gpu/flash-hopper.test.ts; done
shard hopper-rest - --test-name-pattern='^H=(96|48|120) |bit-identical|NaN|does not cover' test/gpu/flash-hopper.test.ts
for p in bfloat16 float16; do shard "flash-$p" - --test-name-pattern="· $p\$" test/gpu/flash.test.ts; done
shard flash-other - --test-name-pattern='other tile configurations|^cuda flash kernel$' test/gpu/flash.test.ts
shard nan - test/gpu/nan.test.ts
shard ring - test/gpu/ring.test.ts
shard backward-flash - --test-name-pattern='· flash$' test/gpu/backward.test.ts
for tool in racecheck synccheck; do
  sanitize "$tool-h128" "$tool" --test-name-pattern='^H=128 .*\(bfloat16\)$' test/gpu/flash-hopper.test.ts
  sanitize "$tool-h64" "$tool" --test-name-pattern='^H=64 .*(padding|window|T=S=700).*\(bfloat16\)$' test/gpu/flash-hopper.test.ts
done
( timeout --kill-after=5 $cap "$harness" check > "$logs/harness-check.log" 2>&1; echo "rc=$?" >> "$logs/harness-check.log"
  for tool in memcheck racecheck synccheck; do hsan $tool; done; wait ) &
wait
echo "correctness done at ${SECONDS} s"

timeout --kill-after=5 60 "$harness" time > "$logs/harness-time.log" 2>&1
echo "harness time rc=$? at ${SECONDS} s"

left=$((deadline - SECONDS))
quick=
[ $left -lt 75 ] && quick=--quick
if [ $left -gt 20 ]; then
  timeout --kill-after=3 $left node --import tsx bench/hopper/s6-bench.ts "$out/s6-bench.json" $quick > "$logs/bench.log" 2>&1
  echo "bench rc=$? at ${SECONDS} s ($quick)"
else
  echo "bench skipped: ${left} s left"
fi

tar -C "$ATTNLAB_CACHE_DIR" -cf - kernels | xz -T8 -3 > "$out/kernels.tar.xz"
echo "== correctness (pass fail skipped; rc)"
summary 16 18 20
echo "harness check: $(grep -c '^PASS' "$logs/harness-check.log") pass, $(grep -c '^FAIL' "$logs/harness-check.log") fail; $(tail -1 "$logs/harness-check.log")"
grep '^FAIL' "$logs/harness-check.log" | head -5
echo "== harness time"
sed -E 's/ +/ /g' "$logs/harness-time.log" | cut -c1-120
echo "== bench"
sed -n '/^TFLOP\/s/,$p' "$logs/bench.log" | head -40
tail -3 "$logs/bench.log"
tar -czf "$out/s6-logs.tgz" -C "$out" logs && rm -rf "$logs"
