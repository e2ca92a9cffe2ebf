#!/usr/bin/env bash
# One device call for the decode kernels (issue 16), ~190 s. From the worktree copy on the GPU machine:
#   bash ../.device/on-gpu.sh bash bench/decode/device-run.sh
# with bench/decode/harness built here beforehand (nvcc, see harness.cu). Order: the standalone
# harness's check first (no Node.js, no NVRTC: a stalled bulk wait traps within seconds), then the GPU
# tests sharded into parallel processes (NVRTC compiles run on all cores) beside memcheck and
# racecheck of the heads kernel, then the benchmarks alone on the GPU: the harness (kernels alone,
# every variant, the heads kernel's split sweep), the library path with PyTorch in the same run, and
# cuDNN's paged decode (composite graph, then ATTNLAB_CUDNN_GRAPH=unified). Every step has its own
# SIGKILL limit: a process blocked in a native call (a GPU wait, an NVRTC compile) ignores SIGTERM.
# Logs in $OUT, a short table last. A kernel cache carried in ../.kcache/kernels.tar.xz seeds NVRTC's.
set -u
out=${OUT:-/tmp/out}
torch=/opt/torch/.venv/bin/python
san=compute-sanitizer
command -v $san > /dev/null || san=/usr/local/cuda/bin/compute-sanitizer
export NO_COLOR=1 ATTNLAB_CACHE_DIR=/tmp/attnlab-decode-cache
mkdir -p "$ATTNLAB_CACHE_DIR"
[ -f ../.kcache/kernels.tar.xz ] && tar -C "$ATTNLAB_CACHE_DIR" -xJf ../.kcache/kernels.tar.xz
summary=()
step() { # name, seconds, log, command...: in the foreground
  local name=$1 limit=$2 log=$3; shift 3; local t0=$SECONDS
  echo "### $name" >> "$out/$log"
  timeout -s KILL "$limit" "$@" >> "$out/$log" 2>&1
  summary+=("$(printf '%-14s rc=%-3s %4ss' "$name" "$?" "$((SECONDS - t0))")")
}
shard() { # name, seconds, node --test arguments...: in the background, its own TAP file under /tmp/tap
  local name=$1 limit=$2; shift 2
  (
    t0=$SECONDS
    timeout -s KILL "$limit" node --import tsx --test --test-reporter=tap "$@" > "/tmp/tap/$name.tap" 2>&1
    echo "rc=$? ${name} $((SECONDS - t0))s" >> "/tmp/tap/$name.tap"
  ) &
}
sanitize() { # name, tool, cases: the heads kernel's quick check under compute-sanitizer, in the background
  local name=$1 tool=$2 cases=$3
  (timeout -s KILL 70 $san --tool "$tool" --error-exitcode 9 ./bench/decode/harness check quick heads "$cases" \
    > "/tmp/tap/$name.san" 2>&1; echo "rc=$? $name" >> "/tmp/tap/$name.san") &
}
mkdir -p /tmp/tap

step harness 30 harness.log ./bench/decode/harness check
tail -1 "$out/harness.log"
# A heads variant that fails the kernel check would fail the library's default shards too: keep the
# library on the row-tile kernel then (the forced-heads shard still shows the failures).
if grep -q '^FAIL' "$out/harness.log"; then export ATTNLAB_DECODE_KERNEL=rows; echo "harness FAIL: ATTNLAB_DECODE_KERNEL=rows"; fi
dec=test/gpu/decode.test.ts
shard dense 70 --test-name-pattern='dense: ' $dec
shard paged 70 --test-name-pattern='paged \(blockSize' $dec
shard forced-bulk 70 --test-name-pattern='forced bulk' $dec
shard forced-async 70 --test-name-pattern='forced async' $dec
shard forced-heads 70 --test-name-pattern='forced heads' $dec
shard forced-rows 70 --test-name-pattern='forced rows' $dec
shard other 70 --test-name-pattern='(packed query|NaN|1,000-step|repeated paged|auto runs)' $dec
shard ring 70 --test-name-pattern='window' test/gpu/ring.test.ts
shard cudnn-paged 70 test/gpu/cudnn-paged.test.ts
sanitize memcheck memcheck 99
sanitize racecheck racecheck 4  # GQA 4:1 ragged, MQA N=32, MQA T=3 causal, K=8 N=32: racecheck is the slow one
wait
cat /tmp/tap/*.tap > "$out/tests.tap"
cat /tmp/tap/*.san > "$out/sanitizers.log"
step bench 30 bench.log ./bench/decode/harness bench sweep
step node-bench 60 node-bench.log node --import tsx bench/decode/decode-bench.ts --out "$out/decode.json" \
  --torch "$torch"
big=64:16384:8,8:131072:8,64:16384:1,1:2048:8
step cudnn-paged 35 cudnn-bench.log node --import tsx bench/decode/decode-bench.ts --out "$out/cudnn.json" \
  --torch none --impl cudnn --layouts paged16,paged64 --shapes $big
step cudnn-unified 35 cudnn-bench.log env ATTNLAB_CUDNN_GRAPH=unified node --import tsx bench/decode/decode-bench.ts \
  --out "$out/cudnn-unified.json" --torch none --impl cudnn --layouts paged16,paged64 --shapes $big
echo "== tests (per shard: pass fail, rc)"
for f in /tmp/tap/*.tap; do
  printf '%-14s %s %s\n' "$(basename "$f" .tap)" "$(grep -E '^# (pass|fail)' "$f" | awk '{printf "%s=%s ", $2, $3}')" \
    "$(tail -1 "$f")"
done
grep -hE '^\s*not ok' /tmp/tap/*.tap | head -20
echo "== sanitizers"; grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY|^check:|^rc=' /tmp/tap/*.san
echo "== harness check"; grep -cE '^ok' "$out/harness.log"; grep -E '^FAIL|^check:' "$out/harness.log" | head
echo "== bench (harness: model's split count marked *)"; grep -E '\*$' "$out/bench.log" | head -90
echo "== node bench"; grep -A40 '^shape' "$out/node-bench.log" | head -45
echo "== cudnn paged (composite, then unified)"; grep -A14 '^shape' "$out/cudnn-bench.log" | head -32
printf '%s\n' "${summary[@]}"
