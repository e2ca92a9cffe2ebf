#!/usr/bin/env bash
# Session 8's first decode call (issue 16): the persistent heads kernel (src/kernels/decode/
# flash_decode_persist.cu, in bench/decode/harness.cu only — the library does not run it) checked and
# timed beside the heads kernel the library runs and PyTorch's SDPA (cuDNN, flash) in the same call.
# No Node.js. ~100 s of wall time expected, at most ~145 s (the SIGKILL limits: sanitizers 75 beside the
# check 60, bench 2 × 20, PyTorch 28). Exact commands:
#   here:   cd /work/wt/decode && git checkout -q decode-s8 && nvcc -O2 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I src/kernels \
#             -DDECODE_SPIN_LIMIT=16777216 -o bench/decode/harness bench/decode/harness.cu && \
#           rm -rf /work/main/.wt-decode && mkdir -p /work/main/.wt-decode && \
#           git ls-files -co --exclude-standard | grep -v '^bench/results/20' | tar -cf - -T - | tar -xf - -C /work/main/.wt-decode
#   device: run(carry: [".wt-decode"], command: "cd .wt-decode && bash bench/decode/s8-call1.sh", timeout_s: 200)
# Order: the harness check (every variant against a float64-accumulated reference; the persistent one at
# its SMs × occupancy grid, at 7 blocks and at 300, more blocks than the small cases have tiles) beside
# memcheck and racecheck of the heads and persistent variants; then, the GPU to itself, the harness
# bench twice (flag off = heads*, on = persist*, interleaved per shape: run-to-run spread) and PyTorch.
# Logs in $OUT; the table last: best heads vs best persist GB/s per shape and layout, PyTorch's beside.
set -u
out=${OUT:-/tmp/out}
mkdir -p "$out" /tmp/s8
. bench/decode/harness-steps.sh  # harness_build, harness_sanitize, harness_torch (factored out in session 9)
t0=$harness_t0
harness_build "$out" 60
harness_sanitize /tmp/s8/memcheck.san memcheck 99 75  # `check quick heads`: heads + persistent variants, dense and paged16
harness_sanitize /tmp/s8/racecheck.san racecheck 4 75  # GQA 4:1 ragged, MQA N=32, MQA T=3 causal, K=8 N=32 (persist 8 and 4 heads)
harness_check_bench "$out" /tmp/s8 60 20
cases='[{"B":64,"S":16384,"K":8},{"B":8,"S":131072,"K":8},{"B":128,"S":8192,"K":8},{"B":64,"S":16384,"K":4},'
cases+='{"B":64,"S":16384,"K":1},{"B":1,"S":2048,"K":8},{"B":1,"S":32768,"K":8}]'
harness_torch "$out" 28 "$cases"

grep "^# persist" "$out/bench1.log"
harness_summary "$out" persist
echo "== GB/s: best heads* (the library's kernel family) vs best persist* per shape, both bench runs; PyTorch same call"
/opt/torch/.venv/bin/python - "$out" <<'EOF'
import sys, collections
sys.path.insert(0, "bench/decode")
from harness_logs import bench_rows, torch_gbs
out = sys.argv[1]
best = collections.defaultdict(dict)  # (B, S, K, layout) -> {family: [(GB/s, name, run)]}
for key, name, _, _, run, gbs in bench_rows(out):
    fam = "persist" if name.startswith("persist") else "heads" if name.startswith("heads") else None
    if fam:
        best[key].setdefault(fam, []).append((gbs, name, run))
torch = torch_gbs(out, [(64, 16384, 8), (8, 131072, 8), (128, 8192, 8), (64, 16384, 4), (64, 16384, 1), (1, 2048, 8), (1, 32768, 8)])
print(f"{'B':>4} {'S':>7} {'K':>2} {'layout':8} {'heads (run1/run2)':>26} {'persist (run1/run2)':>28} {'on/off':>6} {'torch cudnn':>11} {'flash':>6}")
for key in sorted(best, key=lambda k: (-k[0] * k[1], k)):
    row = best[key]
    def cell(fam):
        xs = row.get(fam, [])
        if not xs:
            return "-", 0.0
        per = [max((x for x in xs if x[2] == r), default=None) for r in (1, 2)]
        top = max(xs)
        return f"{'/'.join(f'{p[0]:.0f}' if p else '-' for p in per)} {top[1]}", top[0]
    h, hb = cell("heads")
    p, pb = cell("persist")
    t = torch.get(key[:3], {}) if key[3] == "dense" else {}
    ratio = f"{pb / hb:.3f}" if hb and pb else "-"
    print(f"{key[0]:>4} {key[1]:>7} {key[2]:>2} {key[3]:8} {h:>26} {p:>28} {ratio:>6} "
          f"{t.get('cudnn', 0):>11.0f} {t.get('flash', 0):>6.0f}")
EOF
echo "total $((SECONDS - t0))s"
