#!/usr/bin/env bash
# One device call for the decode kernel (issue 16), 80–110 s. From the worktree copy on the GPU machine:
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
shard dense 60 --test-name-pattern='dense: ' test/gpu/decode.test.ts
shard paged 60 --test-name-pattern='paged \(blockSize' test/gpu/decode.test.ts
shard forced-bulk 60 --test-name-pattern='forced bulk' test/gpu/decode.test.ts
shard forced-async 60 --test-name-pattern='forced async' test/gpu/decode.test.ts
shard other 60 --test-name-pattern='(packed query|NaN|1,000-step)' test/gpu/decode.test.ts
shard ring 60 --test-name-pattern='window' test/gpu/ring.test.ts
(timeout -s KILL 60 $san --tool memcheck --error-exitcode 9 ./bench/decode/harness check quick \
  > /tmp/memcheck.san 2>&1; echo "rc=$? memcheck harness" >> /tmp/memcheck.san) &
wait
cat /tmp/*.tap > "$out/tests.tap"
cat /tmp/memcheck.san > "$out/memcheck.log"
step sweep 30 bench.log ./bench/decode/harness bench sweep
if [ "${DECODE_NODE_BENCH:-1}" = 1 ]; then
  step node-bench 100 bench.log node --import tsx bench/decode/decode-bench.ts --out "$out/decode.json" \
    --torch "$torch"
else  # the peers alone, on decode-bench.ts's shapes, in this same run
  cases='[{"B":64,"S":16384,"K":8},{"B":8,"S":131072,"K":8},{"B":128,"S":8192,"K":8},{"B":64,"S":16384,"K":4},'
  cases+='{"B":64,"S":16384,"K":1},{"B":1,"S":2048,"K":8},{"B":1,"S":8192,"K":8},{"B":1,"S":32768,"K":8}]'
  step torch 40 torch.log "$torch" bench/decode/torch_decode.py \
    "{\"cases\": $(echo "$cases" | sed 's/}/,"N":32,"H":128}/g'), \"repeats\": 30}"
fi
# Where a launch's time goes: dense cp.async and paged16 bulk at B=64 S=16k K=8, and MQA.
step ncu 30 ncu.log ncu --clock-control none -k regex:h_decode --launch-count 3 --launch-skip 5 \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats \
  ./bench/decode/harness bench one 64 16384 8 16 bulk
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
[ -f "$out/torch.log" ] && { echo "== torch"; tail -2 "$out/torch.log" | cut -c1-1500; }
[ -f "$out/ncu.log" ] && { echo "== ncu"; grep -E "h_decode|DRAM Throughput|Memory Throughput|Duration|Achieved Occupancy|Theoretical Occupancy|Registers Per|Stall|Block Limit" "$out/ncu.log" | head -40; }
printf '%s\n' "${summary[@]}"
