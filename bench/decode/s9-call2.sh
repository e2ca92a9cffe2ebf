#!/usr/bin/env bash
# Session 9's second decode call (issue 16, paged MQA K=1 ≥ 4.3 TB/s): the producer-warp kernel with 2 and 4
# producer warps (ws1.4x32.s3f.p2/.p4: is one warp's row-copy issue the limit, as call 1 suggested?) and the
# TMA loader (src/kernels/decode/decode_tma.cuh: tma1.* variants, 4 tensor copies a dense 128-key tile, 32 at
# block 16, 8 at block 64, 128-byte-swizzled stages), checked and timed beside heads1.4x32.s3 (the library's
# kernel) and PyTorch's SDPA in the same call. Harness only, no Node.js. Expected ~110 s of wall time with the
# harness carried, at most ~200 s (SIGKILL limits: sanitizers 110 beside the check 90, bench 2 × 40, PyTorch 25).
#   here:   cd /work/wt/decode && nvcc -O2 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I src/kernels \
#             -DDECODE_SPIN_LIMIT=16777216 -Xptxas -v -o bench/decode/harness bench/decode/harness.cu
#           then the worktree copied to /work/main/.wt-decode (TEAM.md's tar line), stripped to src/kernels,
#           bench/decode and the harness binary
#   device: run(carry: [".wt-decode"], command: "cd .wt-decode && bash bench/decode/s9-call2.sh", timeout_s: 240)
# Order: memcheck (quick: every heads/ws/tma variant, dense and paged16, splits 3) and racecheck (quick, first 2
# cases) in the background beside the full check (dense, paged 16 and 64, splits 1/3/17, ragged lengths incl. 0
# and 1, windows, NaN in V, NaN in K); then, the GPU to itself, the bench twice and PyTorch. Logs under $OUT
# (one tarball); tables last.
set -u
dest=${OUT:-/tmp/out}
out=/tmp/s9-logs  # tarred into $OUT/logs.tgz at the end (one file back)
mkdir -p "$dest" "$out" /tmp/s9
. bench/decode/harness-steps.sh  # harness_build, harness_sanitize, harness_check_bench, harness_torch, harness_summary
t0=$harness_t0
harness_build "$out" 90  # carried; ~40 s if not
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,power.limit --format=csv,noheader > "$out/gpu.txt" 2>&1
harness_sanitize /tmp/s9/memcheck.san memcheck 99 110
harness_sanitize /tmp/s9/racecheck.san racecheck 2 110
# The check, then (if a launch failed: the context is gone after one) again without that variant, so that the
# others are still checked and benched: HARNESS_SKIP takes name prefixes (a tensor-map encode failure: tma).
timeout -s KILL 90 ./bench/decode/harness check > "$out/check.log" 2>&1
echo "check rc=$? $((SECONDS - t0))s: $(tail -1 "$out/check.log")"
skip=
if ! tail -1 "$out/check.log" | grep -q '^check:'; then
  skip=$(grep -m1 -E '^FAIL .*: ' "$out/check.log" | grep -oE ' (ws|tma|heads|persist)[0-9][^ ]*' | tr -d ' ')
  grep -q cuTensorMapEncodeTiled "$out/check.log" && skip=tma
  echo "check stopped: skipping '${skip:-?}' from here"
  HARNESS_SKIP=$skip timeout -s KILL 90 ./bench/decode/harness check > "$out/check2.log" 2>&1
  echo "check2 rc=$? $((SECONDS - t0))s: $(tail -1 "$out/check2.log")"
fi
wait
cat /tmp/s9/*.san > "$out/sanitizers.log"
for r in 1 2; do
  HARNESS_SKIP=$skip timeout -s KILL 40 ./bench/decode/harness bench > "$out/bench$r.log" 2>&1
  echo "bench$r rc=$? $((SECONDS - t0))s"
done
cases='[{"B":64,"S":16384,"K":8},{"B":64,"S":16384,"K":4},{"B":64,"S":16384,"K":1}]'
harness_torch "$out" 25 "$cases"

grep -E "^# (ws|tma)" "$out/bench1.log"
harness_summary "$out" ws
cat "$out"/check*.log | grep -E " tma[0-9]" | awk '{print $1}' | sort | uniq -c
grep -h "Race reported" "$out/sanitizers.log" | sed 's/(DecodeParams.*//' | sort | uniq -c | head -8
echo "== GB/s (kernels alone, the model's split count): best heads* vs best ws*/tma*, both bench runs; PyTorch same call"
/opt/torch/.venv/bin/python bench/decode/s9_table.py "$out"
tar -czf "$dest/logs.tgz" -C "$out" . && echo "total $((SECONDS - t0))s"
