#!/usr/bin/env bash
# Session 8, the lead's second Hopper call: FlashAttention-4's conditional rescale (tiles.cuh SLACK: a
# row's running max moves only when a tile rises more than SLACK above it, base 2, so most tiles skip
# O *= alpha) measured on and off at H=64/128/256 in the harness (the library's schedule decides after).
# The polynomial 2^x share of call 1 lost everywhere (bench/notes/hopper-kernel.md, session 8).
# Here (nvcc ~55 s):
#   mkdir -p /work/main/.wt-lead/bin && nvcc -O2 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I src/kernels \
#     -o /work/main/.wt-lead/bin/harness bench/hopper/harness.cu
# The call (carry [".wt-lead"], no Node.js): cd .wt-lead && bash bench/hopper/s8-call2.sh "$OUT" bin/harness 150
#   1. at once: check10 (every SLACK variant against the float32 oracle, twice for bit-identity, NaN,
#      padding, empty rows, wide logits of std 16) and sanitize10 under memcheck, racecheck, synccheck;
#   2. time11 alone (off / 8 / 4 at H=128, off / 8 at H=64 and 256, causal and not, interleaved three
#      times; then T=2048), sampling clock and power;
#   3. in the time left, ncu on profile10 (off / 8 at D=128 and D=64).
set -u
out=${1:?output folder}
deadline=${3:-150}
logs=$out/logs
mkdir -p "$logs"
export PATH=/usr/local/cuda/bin:$PATH
source scripts/gpu-lib.sh # san, harness_binary
bin=$(harness_binary "${2:?harness binary}" "$logs/run.log")
t0=$SECONDS
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2> /dev/null | head -1)
( timeout --kill-after=5 100 "$bin" check10 > "$logs/check10.log" 2>&1; echo "rc=$?" >> "$logs/check10.log" ) &
for tool in memcheck racecheck synccheck; do
  ( timeout --kill-after=5 60 $san --tool "$tool" --error-exitcode 9 --print-limit 20 "$bin" sanitize10 \
      > "$logs/sanitize10-$tool.san" 2>&1; echo "rc=$?" >> "$logs/sanitize10-$tool.san" ) &
done
wait
echo "[$((SECONDS - t0))s] correctness done"
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv -lms 250 > "$logs/smi.csv" 2>&1 &
smi=$!
timeout -s KILL 100 "$bin" time11 > "$logs/time11.log" 2>&1
echo "[$((SECONDS - t0))s] time11 rc=$?"
kill $smi
left=$((deadline - SECONDS))
if [ -n "$ncu" ] && [ $left -gt 25 ]; then
  timeout -s KILL $((left - 5)) "$ncu" --clock-control none --section SpeedOfLight --section ComputeWorkloadAnalysis \
    --section SchedulerStats --section InstructionStats --print-details all -k regex:hopper_kernel "$bin" profile10 \
    > "$logs/ncu10.txt" 2>&1
  echo "[$((SECONDS - t0))s] ncu rc=$?"
fi
c=$logs/check10.log
echo "== check10: $(grep -c '^PASS' "$c") pass, $(grep -c '^FAIL' "$c") fail; $(tail -2 "$c" | tr '\n' ' ')"
grep -E '^FAIL' "$c" | head -5
for f in "$logs"/sanitize10-*.san; do
  echo "$(basename "$f" .san): $(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY' "$f" | tr '\n' ' ') $(tail -1 "$f")"
done
echo "== time11: TFLOP/s per rep (ratio to SLACK off of the same rep, mean)"
python3 - "$logs/time11.log" << 'PY'
import re, sys, collections
base, ratios, tfs = {}, collections.defaultdict(list), collections.defaultdict(list)
for line in open(sys.argv[1]):
    m = re.search(r"TIME (\S+)\s+H=(\d+) B=(\d+) T=(\d+) causal=(\d) median=([\d.]+) ms.*?([\d.]+) TFLOP/s", line)
    if not m:
        continue
    name, H, B, T, causal, ms, tf = m.groups()
    k = re.search(r"\.slack(\d+)", name)
    key, slack, tf = (int(H), int(T), int(causal)), int(k.group(1)) if k else 0, float(tf)
    if slack == 0:
        base[key] = tf
    tfs[key + (slack,)].append(tf)
    if key in base:
        ratios[key + (slack,)].append(tf / base[key])
for k in sorted(tfs):
    r = ratios.get(k, [])
    print(f"H={k[0]:3d} T={k[1]:5d} {'causal' if k[2] else 'full  '} slack={k[3]}: " + " ".join(f"{x:.1f}" for x in tfs[k])
          + f"   x{sum(r) / len(r) if r else float('nan'):.3f}")
PY
python3 - "$logs/smi.csv" << 'PY'
import csv, statistics, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) >= 4 and r[1].strip()[:1].isdigit()]
c = [float(r[1].split()[0]) for r in rows]
p = [float(r[3].split()[0]) for r in rows if r[3].split()[0].replace('.', '').isdigit()]
if c and p: print(f"smi: clock {min(c):.0f}/{statistics.median(c):.0f}/{max(c):.0f} MHz  power {min(p):.0f}/{statistics.median(p):.0f}/{max(p):.0f} W")
PY
[ -f "$logs/ncu10.txt" ] && grep -E "hopper_kernel|Duration|Issue Slots Busy|Executed Ipc A|^ +(XU|FMA) " "$logs/ncu10.txt" \
  | sed -E 's/ +/ /g' | cut -c1-110 | awk '!seen[$0]++' | head -30
tar -czf "$out/s8-call2-logs.tgz" -C "$out" logs && rm -rf "$logs"
