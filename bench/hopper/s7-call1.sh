#!/usr/bin/env bash
# Session 7, the hopper engineer's first device call: why a third of the tensor time idles at H=128.
#   1. harness timings (bench/hopper/harness.cu `time7`): the library's three variants beside other key
#      tiles and two probes (no softmax, no K/V traffic; tiles.cuh PROBE), then D=128 at short T;
#      nvidia-smi samples the SM clock and power meanwhile;
#   2. ncu (--clock-control none, --set full) on one launch of each library variant (`profile`),
#      exported as text: details, raw metrics, per-SASS-line source counters.
# Run from the project copy's root: bash bench/hopper/s7-call1.sh <harness binary> <out>
set -u
bin=$1 out=$2
export PATH=/usr/local/cuda/bin:$PATH
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2> /dev/null | head -1)
log=$out/run.log
t0=$SECONDS
note() { echo "[$((SECONDS - t0))s] $*" | tee -a "$log"; }
if ! timeout -s KILL 20 "$bin" none >> "$log" 2>&1; then  # the binary built off the device may not load
  note "carried harness failed to start; building here"
  bin=/tmp/harness
  timeout -s KILL 150 nvcc -O2 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I src/kernels -o $bin \
    bench/hopper/harness.cu >> "$log" 2>&1 || note "build failed"
fi
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv -lms 250 \
  > "$out/smi.csv" 2>&1 &
smi=$!
note "time7 start"
timeout -s KILL 90 "$bin" time7 > "$out/time7.log" 2>&1
note "time7 rc=$?"
kill $smi
note "ncu start ($ncu)"
timeout -s KILL 150 "$ncu" --clock-control none --set full --import-source no -k regex:hopper_kernel \
  -o "$out/prof" "$bin" profile >> "$log" 2>&1
note "ncu rc=$?"
rep=$out/prof.ncu-rep
timeout -s KILL 40 "$ncu" -i "$rep" --page details --print-details all > "$out/ncu-details.txt" 2>&1
timeout -s KILL 40 "$ncu" -i "$rep" --page raw --csv 2>&1 | gzip > "$out/ncu-raw.csv.gz"
timeout -s KILL 60 "$ncu" -i "$rep" --page source --csv --print-source sass 2>&1 | gzip > "$out/ncu-source.csv.gz"
note "exports done"
size=$(stat -c %s "$rep" 2> /dev/null || echo 0)
[ "$size" -gt 15000000 ] && { note "report $size bytes: not returned"; rm -f "$rep"; }
echo "== time7"
cut -c1-140 "$out/time7.log"
echo "== smi (sm clock MHz, power W: min/median/max while timing)"
python3 - "$out/smi.csv" << 'EOF'
import csv, statistics, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) >= 4 and 'MHz' in r[1]]
c = [float(r[1].split()[0]) for r in rows]
p = [float(r[3].split()[0]) for r in rows if r[3].split()[0].replace('.', '').isdigit()]
if c and p: print(f"clock {min(c):.0f}/{statistics.median(c):.0f}/{max(c):.0f} MHz  power {min(p):.0f}/{statistics.median(p):.0f}/{max(p):.0f} W  ({len(c)} samples)")
EOF
echo "== ncu headline"
grep -E "hopper_kernel|SM Frequency|Duration|Compute \(SM\) Throughput|Memory Throughput|Issue Slots Busy|No Eligible|Registers Per" \
  "$out/ncu-details.txt" | head -60
cat "$log"
