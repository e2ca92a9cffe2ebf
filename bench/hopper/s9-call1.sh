#!/usr/bin/env bash
# Session 9, the first Hopper call: the dynamic persistent grid (tiles.cuh PERSISTENT = 2: one block
# per SM, a global atomic work counter zeroed before each launch, items longest first over L2-sized
# sections of heads, handed from the producer to the consumers through shared memory and the Q
# barriers) against the oracle, under the sanitizers, and timed beside the library's tiles.
# Prepared on branch hopper-s9 WITHOUT a GPU (nvcc/ptxas only): nothing here has run yet.
#
# Build here (CUDA 13 nvcc, ~110 s for the whole harness; ptxas: 0 spills on every variant; ~13 MB
# carried with the binary):
#   rm -rf /work/main/.wt-hopper && mkdir -p /work/main/.wt-hopper/bin && cd /work/wt/hopper && \
#     git ls-files -co --exclude-standard | grep -v '^bench/results/20' | tar -cf - -T - | tar -xf - -C /work/main/.wt-hopper && \
#     nvcc -O2 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I src/kernels \
#       -o /work/main/.wt-hopper/bin/harness bench/hopper/harness.cu
# The call (no Node.js): carry [".wt-hopper"], timeout_s 170, command
#   cd .wt-hopper && bash bench/hopper/s9-call1.sh "$OUT" bin/harness 150
# Expected: ~5 s start, ~75 s correctness (check12 beside sanitize12 under memcheck, racecheck and
# synccheck, capped at 80 and 70 s, plus cuobjdump's SASS of the dynamic variants), ~40 s time14
# (148 timings of ~0.25 s: 150 ms settle + 15 launches), ~10 s time15, ~2 s summary: ~135 s; the
# SIGKILL bounds keep it under 150.
#   1. check12 (every dynamic variant against the float32 oracle, twice for bit-identity, bit for bit
#      against the 2-D grid, many items per block with grids capped at 1/3/7 blocks, ragged and empty
#      rows) and sanitize12 under the three sanitizers, at once; SASS: ATOMG and setmaxnreg per variant;
#   2. time14 alone (library tile vs the same tile dynamic, causal and not, T=8192 B=4, T=2048 B=16,
#      T=1024 B=32, H=64/128/256, three interleaved reps; the static walk once at H=128), with clocks;
#   3. time15 in the time left (~10 s): the dynamic grid's section of heads swept at D=128 causal.
set -u
out=${1:?output folder}
deadline=${3:-150}
source scripts/gpu-lib.sh # san, harness_call
harness_call "$out" "${2:?harness binary}"
t0=$SECONDS
( timeout --kill-after=5 80 "$bin" check12 > "$logs/check12.log" 2>&1; echo "rc=$?" >> "$logs/check12.log" ) &
for tool in memcheck racecheck synccheck; do
  ( timeout --kill-after=5 70 $san --tool "$tool" --error-exitcode 9 --print-limit 20 "$bin" sanitize12 \
      > "$logs/sanitize12-$tool.san" 2>&1; echo "rc=$?" >> "$logs/sanitize12-$tool.san" ) &
done
# Where the atomic sits: per dynamic variant the count of ATOMG, setmaxnreg and local-memory
# instructions, and the instructions around the first ATOMG of the 192x80 D=128 variant.
( timeout -s KILL 40 cuobjdump -sass "$bin" > "$logs/harness.sass" 2>&1
  python3 - "$logs/harness.sass" > "$logs/sass-dynamic.txt" 2>&1 << 'PY'
import re, sys
funcs = re.split(r"\n\s+Function : ", open(sys.argv[1]).read())
for f in funcs[1:]:
    name = f.split("\n", 1)[0]
    m = re.search(r"HopperConfigI(.*?)EEEv", name)
    if not m:
        continue
    args = [a[1] for a in re.findall(r"L([ib])(\d+)E", m.group(1))]
    if len(args) < 13 or args[12] != "2":
        continue
    ins = [re.sub(r"/\*[0-9a-f]+\*/", "", l).split(";")[0].strip() for l in f.split("\n") if re.search(r"/\*[0-9a-f]{4}\*/", l)]
    n = {k: sum(1 for t in ins if re.search(p, t)) for k, p in
         (("ATOMG", "ATOMG"), ("USETMAXREG", "USETMAXREG"), ("STL", r"\bSTL"), ("LDL", r"\bLDL"), ("UTMALDG", "UTMALDG"))}
    print(",".join(args) + f": {len(ins)} instr, " + ", ".join(f"{k} {v}" for k, v in n.items()))
    if args[:2] == ["128", "80"]:
        for i, t in enumerate(ins):
            if "ATOMG" in t:
                print("\n".join(f"   {j:5d} {ins[j][:100]}" for j in range(max(0, i - 8), min(len(ins), i + 8))))
                break
PY
) &
wait
echo "[$((SECONDS - t0))s] correctness done"
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv -lms 250 > "$logs/smi.csv" 2>&1 &
smi=$!
left=$((deadline - SECONDS - 8))
timeout -s KILL $((left > 30 ? left : 30)) "$bin" time14 > "$logs/time14.log" 2>&1
echo "[$((SECONDS - t0))s] time14 rc=$?"
left=$((deadline - SECONDS - 6))
if [ $left -gt 15 ]; then
  timeout -s KILL $left "$bin" time15 > "$logs/time15.log" 2>&1
  echo "[$((SECONDS - t0))s] time15 rc=$?"
fi
kill $smi
c=$logs/check12.log
echo "== check12: $(grep -c '^PASS' "$c") pass, $(grep -c '^FAIL' "$c") fail, $(grep -c '^SAME' "$c") same, $(grep -c '^DIFF' "$c") diff; $(tail -2 "$c" | tr '\n' ' ')"
grep -E '^(FAIL|DIFF)' "$c" | head -8
for f in "$logs"/sanitize12-*.san; do
  echo "$(basename "$f" .san): $(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY' "$f" | tr '\n' ' ') $(grep -c '^PASS' "$f") pass $(tail -1 "$f")"
done
echo "== SASS of the dynamic variants (args: D,BN,STAGES,FP16,OVERLAP,BIAS,MASK,CONSUMERS,PP,LW,DS,GROUPED,PERSISTENT,PROBE,SLACK,DV)"
head -24 "$logs/sass-dynamic.txt"
echo "== time14: TFLOP/s per rep, mean ratios within each rep (* = the library's tile there)"
python3 - "$logs/time14.log" << 'PY'
import re, sys, collections
tf = collections.defaultdict(list)
for line in open(sys.argv[1]):
    m = re.search(r"TIME (\S+)\s+H=(\d+) B=(\d+) T=(\d+) causal=(\d) median=([\d.]+) ms.*?([\d.]+) TFLOP/s", line)
    if not m:
        continue
    name, H, B, T, causal, ms, t = m.groups()
    tile = re.search(r"\.(\d+x\d+)x\dwg", name).group(1)
    grid = "dynamic" if ".dynamic" in name else "static" if ".persistent" in name else "2-D"
    tf[(int(H), int(T), int(causal), tile, grid)].append(float(t))
def library_tile(H, T):
    return {64: "192x128", 256: "128x80"}.get(H, "192x80" if T >= 8192 else "128x128")
for k in sorted(tf):
    H, T, causal, tile, grid = k
    ref = tf.get((H, T, causal, library_tile(H, T), "2-D"), [])
    same = tf.get((H, T, causal, tile, "2-D"), [])
    mean = lambda r: sum(r) / len(r) if r else float("nan")
    r = [a / b for a, b in zip(tf[k], ref)]
    q = [a / b for a, b in zip(tf[k], same)]
    mark = "*" if tile == library_tile(H, T) else " "
    print(f"H={H:3d} T={T:5d} {'causal' if causal else 'full  '} {tile:>7}{mark} {grid:7}: "
          + " ".join(f"{x:6.1f}" for x in tf[k]) + f"   x{mean(r):.3f} of the library, x{mean(q):.3f} of its tile's 2-D grid")
PY
[ -f "$logs/time15.log" ] && echo "== time15: D=128 causal, dynamic by section of heads (0 = the rule), TFLOP/s per rep, x of the 2-D grid" && \
python3 - "$logs/time15.log" << 'PY'
import re, sys, collections
tf, base, section = collections.defaultdict(list), collections.defaultdict(list), None
for line in open(sys.argv[1]):
    m = re.match(r"section (\d+)", line)
    if m:
        section = int(m.group(1))
        continue
    m = re.search(r"TIME (\S+)\s+H=\d+ B=(\d+) T=(\d+) causal=\d median=[\d.]+ ms.*?([\d.]+) TFLOP/s", line)
    if not m:
        continue
    name, B, T, t = m.group(1), int(m.group(2)), int(m.group(3)), float(m.group(4))
    if ".dynamic" in name:
        tf[(T, section)].append(t)
    else:
        base[T].append(t)
        section = None
for (T, sec), v in sorted(tf.items()):
    r = [a / b for a, b in zip(v, base[T])]
    print(f"T={T:5d} section={sec:4d}: " + " ".join(f"{x:6.1f}" for x in v) + f"   x{sum(r) / len(r):.3f}   (2-D: "
          + " ".join(f"{x:.1f}" for x in base[T]) + ")")
PY
python3 - "$logs/smi.csv" << 'PY'
import csv, statistics, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) >= 4 and r[1].strip()[:1].isdigit()]
c = [float(r[1].split()[0]) for r in rows]
p = [float(r[3].split()[0]) for r in rows if r[3].split()[0].replace('.', '').isdigit()]
if c and p: print(f"smi: clock {min(c):.0f}/{statistics.median(c):.0f}/{max(c):.0f} MHz  power {min(p):.0f}/{statistics.median(p):.0f}/{max(p):.0f} W")
PY
rm -f "$logs/harness.sass"
tar -czf "$out/s9-call1-logs.tgz" -C "$out" logs && rm -rf "$logs"
