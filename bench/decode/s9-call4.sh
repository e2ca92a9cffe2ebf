#!/usr/bin/env bash
# Session 9's call D (decode, second shift): more consumer warps on the TMA decode kernel now that none loads.
# A record of a call that ran at b2f81d5: its variants lost and are NOT on main (branch decode-s9-callD keeps
# them; main's kernel source and harness are 4505cd0's, the source the library's GPU tests ran). Run it from
# a checkout of decode-s9-callD.
# New harness variants beside the library's tma1.4x32.s3f and heads1.4x32.s3 (bench/decode/s9-plan.md, "Call D"):
# tma1.4x32.s3qf (the library's 8 consumers, Q in shared: its cost), tma1.6x16.s4qf (12 consumers, 96-key tiles
# 4 deep, 128 registers), and by setmaxnreg (producer warpgroup at 40 registers, consumers at 152)
# tma1.6x32.s2qf.r152 (192-key tiles 2 deep) and tma1.6x16.s4qf.r152. Harness only, no Node.js.
#   here:   cd /work/wt/decode && nvcc -O2 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I src/kernels \
#             -DDECODE_SPIN_LIMIT=16777216 -Xptxas -v -o bench/decode/harness bench/decode/harness.cu
#           then the worktree copied to /work/main/.wt-decode, stripped to src/kernels, bench/decode + the binary
#   device: run(carry: [".wt-decode"], command: "cd .wt-decode && bash bench/decode/s9-call4.sh", timeout_s: 120)
# Order: memcheck and racecheck (quick, the new variants) in the background beside the full check of every tma
# variant (dense, paged 16 and 64 where the tile takes the block, splits 1/3/17, ragged 0/1, windows, NaN in V
# and K); then the bench twice at K=1 (B=64 S=16k, B=128 S=8k, B=8 S=128k) and PyTorch dense. ~40 s expected.
set -u
dest=${OUT:-/tmp/out}; out=/tmp/s9d-logs; mkdir -p "$dest" "$out"
t0=$SECONDS
san=compute-sanitizer; command -v $san > /dev/null || san=/usr/local/cuda/bin/compute-sanitizer
new=tma1.4x32.s3qf,tma1.6
[ -x bench/decode/harness ] || { echo "no harness binary"; exit 2; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,power.limit --format=csv,noheader > "$out/gpu.txt" 2>&1
(HARNESS_ONLY=$new timeout -s KILL 60 $san --tool memcheck --error-exitcode 9 ./bench/decode/harness check quick \
  > "$out/memcheck.log" 2>&1; echo "rc=$? memcheck $((SECONDS - t0))s" >> "$out/memcheck.log") &
(HARNESS_ONLY=$new timeout -s KILL 60 $san --tool racecheck --error-exitcode 9 ./bench/decode/harness check quick heads 2 \
  > "$out/racecheck.log" 2>&1; echo "rc=$? racecheck $((SECONDS - t0))s" >> "$out/racecheck.log") &
HARNESS_ONLY=tma timeout -s KILL 60 ./bench/decode/harness check > "$out/check.log" 2>&1
echo "check rc=$? $((SECONDS - t0))s: $(tail -1 "$out/check.log")"
skip=ws,persist
if ! tail -1 "$out/check.log" | grep -q '^check:'; then  # a launch failed (the context is gone): bench without it
  skip=$skip,$(grep -m1 -E '^FAIL .*: ' "$out/check.log" | grep -oE ' tma[0-9][^ ]*' | tr -d ' ')
  echo "check stopped: bench skips '$skip'"
fi
wait
shapes=64:16384:1,128:8192:1,8:131072:1
for r in 1 2; do
  HARNESS_SKIP=$skip HARNESS_SHAPES=$shapes timeout -s KILL 30 ./bench/decode/harness bench > "$out/bench$r.log" 2>&1
  echo "bench$r rc=$? $((SECONDS - t0))s"
done
cases='[{"B":64,"S":16384,"K":1,"N":32,"H":128},{"B":128,"S":8192,"K":1,"N":32,"H":128},{"B":8,"S":131072,"K":1,"N":32,"H":128}]'
timeout -s KILL 25 /opt/torch/.venv/bin/python bench/decode/torch_decode.py "{\"cases\": $cases, \"repeats\": 30}" \
  > "$out/torch.json" 2> "$out/torch.err"
echo "torch rc=$? $((SECONDS - t0))s"
echo "== check"; grep -E '^FAIL|^check:' "$out/check.log" | head -12
grep -E " tma[0-9]" "$out/check.log" | awk '{print $1, $5}' | sort | uniq -c
echo "== sanitizers"; grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY|^check:|^rc=|^FAIL' "$out"/*check.log | grep -v '^check: .* runs, 0 failures$' | head
grep -h "Race reported" "$out/racecheck.log" | sed 's/(DecodeParams.*//' | sort | uniq -c | head -4
grep -hE "^# tma" "$out/bench1.log"
/opt/torch/.venv/bin/python bench/decode/s9_tma_table.py "$out" "$shapes"
tar -czf "$dest/logs.tgz" -C "$out" . && echo "total $((SECONDS - t0))s"
