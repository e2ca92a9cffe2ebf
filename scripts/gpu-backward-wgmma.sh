#!/usr/bin/env bash
# The wgmma backward on a Hopper GPU, one step per call (each well under 90 s), logs under $1:
#   sass      nvcc -Xptxas -v of hopper/hopper_bwd.cu (both loops, D=64/128), NVRTC's ptxas report of the
#             modules attnlab builds, and the dK/dV kernel's SASS counts (HGMMA, UBLKRED: the dQ bulk reduce-adds, RED: per-element reductions, LDL/STL: spills)
#   test      test/gpu/backward/hopper.test.ts (each loop in a process of its own) and the flash
#             backward suite, at once
#   suite     the shared gradient suite's flash runs (CASES, LONG_CASES, deterministic), default loop and wgmma-ws
#   sanitize  memcheck, racecheck and synccheck on a small H=128 causal case, memcheck and racecheck on a
#             small H=64 causal one, each on both wgmma loops
#   loops     the backward loops side by side in one process (wgmma, wgmma-ws, mma.sync, wgmma deterministic),
#             B=4 T=S=8192 N=16 H=128, 64, 96
#   bench     the backward suite: attnlab flash and cudnn beside PyTorch's SDPA backward (cuDNN, flash),
#             B=4 T=S=8192 N=16 H=64/128 bf16, causal and not (TFLOP/s = 2.5× the forward's, halved causal)
#   profile   ncu on one wgmma and one wgmma-ws dK/dV launch, B=4 T=S=8192 N=16 H=128 non-causal: speed of light, warp
#             stall reasons, pipe utilisation
#
#   bash scripts/gpu-backward-wgmma.sh STEP "$OUT/hbwd"
set -u
step=$1
logs=${2:-out}
mkdir -p "$logs"
cap=${CAP:-85}  # seconds per process (CAP=55 for a 60-second call)
source scripts/gpu-lib.sh

case $step in
sass)
  # NVRTC's own ptxas report (it can differ from nvcc's), from an empty cache so every module compiles,
  # beside the nvcc builds, all at once (one compile takes ~7 s of a core).
  ATTNLAB_CACHE_DIR=$(mktemp -d) timeout 80 node --import tsx benchmarks/harnesses/backward-registers.ts 64 128 \
    > "$logs/nvrtc-registers.log" 2>&1 &
  cd src/kernels || exit 1
  for D in 64 128; do
    for F in 0 1; do
      nvcc -cubin -gencode=arch=compute_90a,code=sm_90a -std=c++17 -Xptxas -v -I . -DFLASH_D=$D -DFLASH_FP16=$F \
        -o "$logs/hopper_bwd.d$D.f$F.cubin" hopper/hopper_bwd.cu > "$logs/ptxas.d$D.f$F.log" 2>&1 &
    done
    nvcc -cubin -gencode=arch=compute_90a,code=sm_90a -std=c++17 -Xptxas -v -I . -DFLASH_D=$D -DFLASH_FP16=0 \
      -DFLASH_BWD_WS=1 -o "$logs/hopper_bwd_ws.d$D.cubin" hopper/hopper_bwd.cu > "$logs/ptxas-ws.d$D.log" 2>&1 &
  done
  wait
  for f in "$logs"/ptxas*.log; do
    echo "== $(basename "$f")"
    grep -A2 "entry function 'attnlab_flash_bwd_dkdv" "$f" | grep -E 'Compiling|Used|spill'
  done
  echo "== NVRTC"
  grep -E '^==|dkdv|Used|spill' "$logs/nvrtc-registers.log" | head -40
  for cubin in hopper_bwd.d64.f0 hopper_bwd.d128.f0 hopper_bwd_ws.d64 hopper_bwd_ws.d128; do
    cuobjdump -sass -fun attnlab_flash_bwd_dkdv "$logs/$cubin.cubin" > "$logs/$cubin.dkdv.sass"
    printf '%s dkdv SASS:' "$cubin"
    for op in HGMMA UBLKRED 'REDG| RED\.' UTMALDG LDGSTS 'LDL' 'STL' 'BAR\.SYNC' 'SYNCS' 'USETMAXREG' 'STS\.64'; do
      printf ' %s=%s' "$op" "$(grep -cE "$op" "$logs/$cubin.dkdv.sass")"
    done
    echo
  done
  ;;
test)
  # Five processes at once: each compiles its own modules (one NVRTC compile of hopper_bwd.cu takes
  # ~7 s of a core), so that the cold kernel cache costs the step once, not three times in a row.
  for dtype in bfloat16 float16; do
    for loop in wgmma wgmma-ws; do
      shard "$loop-$dtype" - --test-name-pattern="· $dtype( · deterministic)? · $loop\$" test/gpu/backward/hopper.test.ts
    done
  done
  shard flash-backward - test/gpu/backward/flash.test.ts
  wait
  summary 16 24 20
  ;;
suite)
  # The shared gradient suite's flash runs (test/gpu/backward/backends.test.ts), on the default loop and on wgmma-ws.
  for run in 'flash$' 'flash long$' 'flash deterministic$'; do
    name=$(echo "$run" | tr -cd 'a-z')
    shard "suite-$name" - --test-name-pattern="· $run" test/gpu/backward/backends.test.ts
    shard "suite-ws-$name" ATTNLAB_FLASH_BWD_KERNEL=wgmma-ws --test-name-pattern="· $run" test/gpu/backward/backends.test.ts
  done
  wait
  summary 24 24 20
  ;;
sanitize)
  sanitize memcheck-d128 memcheck --test-name-pattern='^T=257 S=257 H=128 causal' test/gpu/backward/hopper.test.ts
  sanitize racecheck-d128 racecheck --test-name-pattern='^T=257 S=257 H=128 causal' test/gpu/backward/hopper.test.ts
  sanitize synccheck-d128 synccheck --test-name-pattern='^T=257 S=257 H=128 causal' test/gpu/backward/hopper.test.ts
  sanitize memcheck-d64 memcheck --test-name-pattern='^T=S=128 H=64 causal' test/gpu/backward/hopper.test.ts
  sanitize racecheck-d64 racecheck --test-name-pattern='^T=S=128 H=64 causal' test/gpu/backward/hopper.test.ts
  wait
  summary 16 24 20
  ;;
loops)
  for H in ${HS:-128 64 96}; do
    timeout 28 node --import tsx benchmarks/harnesses/backward-loop-variants.ts 4 8192 16 $H wgmma wgmma-ws mma wgmma+det
  done 2>&1 | tee "$logs/loops.txt"
  ;;
bench)
  # BENCH_ARGS adds options, e.g. "--head-dim 64": the suite at one head dim (a shorter call).
  timeout $cap node bin/attnlab.js bench --suite backward --impl flash,cudnn --peers torch --out "$logs/bench" \
    --no-progress ${BENCH_ARGS:-} 2>&1 | tee "$logs/bench${BENCH_ARGS:+-${BENCH_ARGS// /}}.txt" | tail -40
  ;;
profile)
  ncu=ncu
  command -v $ncu > /dev/null || ncu=/usr/local/cuda/bin/ncu
  timeout $cap $ncu -k regex:dkdv -c 2 --section SpeedOfLight --section WarpStateStats --section SchedulerStats \
    --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
    node --import tsx benchmarks/harnesses/backward-loop-variants.ts --profile 4 8192 16 128 wgmma wgmma-ws \
    > "$logs/ncu-d128.txt" 2>&1
  echo "rc=$?" >> "$logs/ncu-d128.txt"
  grep -E 'Duration|Throughput|Stall|Issue Slots|Pipe|Warp Cycles|rc=' "$logs/ncu-d128.txt" | head -60
  ;;
*)
  echo "unknown step $step (sass, test, suite, sanitize, loops, bench, profile)" >&2
  exit 2
  ;;
esac
