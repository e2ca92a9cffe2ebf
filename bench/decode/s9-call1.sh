#!/usr/bin/env bash
# Session 9's decode call (issue 16, paged MQA ≥ 4.3 TB/s): the producer-warp heads kernel
# (src/kernels/decode/flash_decode_ws.cu, in bench/decode/harness.cu only — the library does not run it)
# checked and timed beside the heads kernel the library runs, and PyTorch's SDPA (cuDNN, flash) in the
# same call. No Node.js. Expected ~110 s of wall time with the harness carried (~145 s if it is built
# there: +35 s), at most ~180 s (the SIGKILL limits: sanitizers 100 beside the check 70, bench 2 × 30,
# PyTorch 20). Exact commands:
#   here:   cd /work/wt/decode && nvcc -O2 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I src/kernels \
#             -DDECODE_SPIN_LIMIT=16777216 -Xptxas -v -o bench/decode/harness bench/decode/harness.cu && \
#           rm -rf /work/main/.wt-decode && mkdir -p /work/main/.wt-decode && \
#           git ls-files -co --exclude-standard | grep -v '^bench/results/20' | tar -cf - -T - | tar -xf - -C /work/main/.wt-decode
#           (bench/decode/harness is untracked and not ignored, so the tar carries it; never commit it)
#   device: run(carry: [".wt-decode"], command: "cd .wt-decode && bash bench/decode/s9-call1.sh", timeout_s: 240)
# Order: the harness check (every variant against a float64-accumulated reference: dense, paged 16 and 64,
# splits 1/3/17, ragged lengths, windows, NaN in V, NaN in K) beside memcheck (quick: every heads/ws variant, all
# cases) and racecheck (quick, first 2 cases: GQA 4:1 ragged, MQA N=32 — the ws kernel's mbarrier-only
# hand-offs); then, the GPU to itself, the harness bench twice and PyTorch. Logs in $OUT; tables last:
# (1) best heads* vs best ws* per shape and layout, PyTorch's beside; (2) every variant at B=64 S=16k
# K=1 and K=4 as a ratio to the library's heads kernel of the same bench run.
set -u
out=${OUT:-/tmp/out}
mkdir -p "$out" /tmp/s9
. bench/decode/harness-steps.sh  # harness_build, harness_sanitize, harness_torch
t0=$harness_t0
harness_build "$out" 90  # not carried: ~35 s
harness_sanitize /tmp/s9/memcheck.san memcheck 99 100  # quick: every heads/persist/ws variant, dense and paged16, splits 3
harness_sanitize /tmp/s9/racecheck.san racecheck 2 100  # GQA 4:1 ragged, MQA N=32
harness_check_bench "$out" /tmp/s9 70 30
cases='[{"B":64,"S":16384,"K":8},{"B":64,"S":16384,"K":4},{"B":64,"S":16384,"K":1}]'
harness_torch "$out" 20 "$cases"

grep "^# ws" "$out/bench1.log"
harness_summary "$out" ws
echo "== GB/s (kernels alone, the model's split count): best heads* vs best ws*, both bench runs; PyTorch same call"
/opt/torch/.venv/bin/python bench/decode/s9_table.py "$out"
echo "total $((SECONDS - t0))s"
