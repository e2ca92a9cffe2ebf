#!/usr/bin/env bash
# One device call for the decode kernel (issue 16), ~3 minutes. From the worktree copy on the GPU machine:
#   bash ../.device/on-gpu.sh bash bench/decode/device-run.sh
# with bench/decode/harness built here beforehand (nvcc, see harness.cu). Order: the standalone
# harness first (no Node.js, no NVRTC: a stalled bulk wait traps within seconds, and the KILL limit
# bounds the rest), then the GPU tests sharded into parallel processes (NVRTC compiles run on all
# cores) beside memcheck, then the benchmarks alone on the GPU. Every step has its own SIGKILL limit:
# a process blocked in a native call (a GPU wait, an NVRTC compile) does not end on SIGTERM.
# Logs in $OUT (at most 8 files come back), a short table last.
set -u
out=${OUT:-/tmp/out}
torch=/opt/torch/.venv/bin/python
san=compute-sanitizer
command -v $san > /dev/null || san=/usr/local/cuda/bin/compute-sanitizer
export NO_COLOR=1
summary=()
step() { # name, seconds, log, command...: in the foreground
  local name=$1 limit=$2 log=$3; shift 3; local t0=$SECONDS
  echo "### $name" >> "$out/$log"
  timeout -s KILL "$limit" "$@" >> "$out/$log" 2>&1
  summary+=("$(printf '%-14s rc=%-3s %4ss' "$name" "$?" "$((SECONDS - t0))")")
}
shard() { # name, seconds, node --test arguments...: in the background, its own TAP file under /tmp
  local name=$1 limit=$2; shift 2
  (
    t0=$SECONDS
    timeout -s KILL "$limit" node --import tsx --test --test-reporter=tap "$@" > "/tmp/$name.tap" 2>&1
    echo "rc=$? ${name} $((SECONDS - t0))s" >> "/tmp/$name.tap"
  ) &
}

step harness 25 harness.log ./bench/decode/harness check
tail -2 "$out/harness.log"
shard dense 110 --test-name-pattern='dense: ' test/gpu/decode.test.ts
shard paged 110 --test-name-pattern='paged \(blockSize' test/gpu/decode.test.ts
shard forced-bulk 110 --test-name-pattern='forced bulk' test/gpu/decode.test.ts
shard forced-async 110 --test-name-pattern='forced async' test/gpu/decode.test.ts
shard other 110 --test-name-pattern='(packed query|NaN|1,000-step)' test/gpu/decode.test.ts
shard ring 110 --test-name-pattern='window' test/gpu/ring.test.ts
(timeout -s KILL 100 $san --tool memcheck --error-exitcode 9 ./bench/decode/harness check quick \
  > /tmp/memcheck.san 2>&1; echo "rc=$? memcheck harness" >> /tmp/memcheck.san) &
wait
cat /tmp/*.tap > "$out/tests.tap"
cat /tmp/memcheck.san > "$out/memcheck.log"
step sweep 60 bench.log ./bench/decode/harness bench sweep
step node-bench 100 bench.log node --import tsx bench/decode/decode-bench.ts --out "$out/decode.json" \
  --torch "$torch"
echo "== tests (per shard: pass fail, rc)"
for f in /tmp/*.tap; do
  printf '%-14s %s %s\n' "$(basename "$f" .tap)" "$(grep -E '^# (pass|fail)' "$f" | awk '{printf "%s=%s ", $2, $3}')" \
    "$(tail -1 "$f")"
done
grep -hE '^\s*not ok' /tmp/*.tap | head -20
echo "== memcheck"; grep -E 'ERROR SUMMARY|check:' "$out/memcheck.log"; tail -1 "$out/memcheck.log"
echo "== harness check"; grep -cE '^ok' "$out/harness.log"; grep -E '^FAIL|^check:' "$out/harness.log" | head
echo "== bench (harness: model's split count marked *)"; grep -E '\*$' "$out/bench.log" | head -70
echo "== node bench"; grep -A40 '^shape' "$out/bench.log" | head -40
printf '%s\n' "${summary[@]}"
