#!/usr/bin/env bash
# The wgmma backward on a Hopper GPU, one step per call (each well under 90 s), logs under $1:
#   sass      nvcc -Xptxas -v of hopper/hopper_bwd.cu as the default builds it (FLASH_BWD_LEAN; both loops,
#             D=64/128, deterministic, and wgmma-ws with dQ split by keys: FLASH_BWD_PINGPONG=1), NVRTC's ptxas
#             report of the modules attnlab builds, and the dK/dV kernel's SASS counts (HGMMA, UBLKRED: the dQ bulk
#             reduce-adds, RED: per-element reductions, LDL/STL: spills, STRONG.GPU and NANOSLEEP: the semaphores)
#   test      test/gpu/backward/hopper.test.ts (each loop in a process of its own) and the flash
#             backward suite, at once
#   check     the wgmma loops in one call (CHECK_LOOPS, default wgmma and wgmma-ws as shipped; also plain-wgmma,
#             plain-ws (their default switches off) and pingpong: test/gpu/backward/hopper.test.ts, LOOP_VARIABLES): per
#             loop its oracle cases in two processes (bf16; fp16 and deterministic), the deterministic repeats on
#             three shapes (wgmma and wgmma-ws), memcheck, racecheck and synccheck on T=257 H=128 causal (whole and
#             partial tiles), for pingpong memcheck and racecheck on T=S=128 H=64 causal too, and for plain-ws and
#             pingpong the gradient NaN suite (nan.test.ts) and flash.test.ts's NaN in Q, K or dO cases under their
#             variables; memcheck on the deterministic twin; all at once (jobs_max processes at a time,
#             default the cores)
#   suite     the shared gradient suite's flash runs (CASES, LONG_CASES, deterministic), default loop and wgmma-ws
#   sanitize  memcheck, racecheck and synccheck on a small H=128 causal case, memcheck and racecheck on a
#             small H=64 causal one, each on both wgmma loops
#   sanitize-det  memcheck, racecheck and synccheck on a deterministic case at H=128 (causal) and at H=64 (a
#             window, padding lengths), each on both wgmma loops
#   loops     the backward loops side by side in one process (SPECS, default wgmma, wgmma-ws, mma.sync and
#             both wgmma loops deterministic), B=4 T=S=8192 N=16 H=128, 64, 96 (HS), LOOP_CAP seconds each
#   sweep     T = 1k … 32k at B·T = 32k (N=16, H=128): wgmma, wgmma deterministic and attnlab's cudnn in one process each
#   bench     the backward suite: attnlab flash and cudnn beside PyTorch's SDPA backward (cuDNN, flash),
#             B=4 T=S=8192 N=16 H=64/128 bf16, causal and not (TFLOP/s = 2.5× the forward's, halved causal)
#   profile   ncu --set full (clocks left alone) on one dK/dV launch of each loop in PROFILE_LOOPS (default
#             wgmma), B=4 T=S=8192 N=16 H=PROFILE_H (128) non-causal: the details page (speed of light, pipes,
#             warp stalls, shared-memory wavefronts) and the per-instruction SASS stall samples as CSV
#
#   bash scripts/gpu-backward-wgmma.sh STEP "$OUT/hbwd"
set -u
step=$1
logs=${2:-out}
mkdir -p "$logs"
cap=${CAP:-85}  # seconds per process (CAP=55 for a 60-second call)
source scripts/gpu-lib.sh
# Every process of every step shares attnlab's kernel cache (the default folder, or ATTNLAB_CACHE_DIR; writes
# are temp + rename): the steps compile each module once. A carried .kcache/kernels.tar.xz (gpu-verify.sh's)
# seeds an empty one.
cache=${ATTNLAB_CACHE_DIR:-$HOME/.cache/attnlab}
if [ ! -d "$cache/kernels" ] && [ -f .kcache/kernels.tar.xz ]; then
  mkdir -p "$cache" && tar -C "$cache" -xJf .kcache/kernels.tar.xz
fi

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
        -DFLASH_BWD_LEAN=1 -o "$logs/hopper_bwd.d$D.f$F.cubin" hopper/hopper_bwd.cu > "$logs/ptxas.d$D.f$F.log" 2>&1 &
    done
    nvcc -cubin -gencode=arch=compute_90a,code=sm_90a -std=c++17 -Xptxas -v -I . -DFLASH_D=$D -DFLASH_FP16=0 \
      -DFLASH_BWD_LEAN=1 -DFLASH_BWD_WS=1 -o "$logs/hopper_bwd_ws.d$D.cubin" hopper/hopper_bwd.cu > "$logs/ptxas-ws.d$D.log" 2>&1 &
    nvcc -cubin -gencode=arch=compute_90a,code=sm_90a -std=c++17 -Xptxas -v -I . -DFLASH_D=$D -DFLASH_FP16=0 \
      -DFLASH_BWD_LEAN=1 -DFLASH_BWD_WS=1 -DFLASH_BWD_PINGPONG=1 -o "$logs/hopper_bwd_pp.d$D.cubin" hopper/hopper_bwd.cu \
      > "$logs/ptxas-pp.d$D.log" 2>&1 &
    for W in 0 1; do
      nvcc -cubin -gencode=arch=compute_90a,code=sm_90a -std=c++17 -Xptxas -v -I . -DFLASH_D=$D -DFLASH_FP16=0 -DFLASH_BWD_LEAN=1 \
        -DFLASH_BWD_WS=$W -DFLASH_BWD_DETERMINISTIC=1 -o "$logs/hopper_bwd_det.d$D.w$W.cubin" hopper/hopper_bwd.cu \
        > "$logs/ptxas-det.d$D.w$W.log" 2>&1 &
    done
  done
  wait
  for f in "$logs"/ptxas*.log; do
    echo "== $(basename "$f")"
    grep -A2 "entry function 'attnlab_flash_bwd_dkdv" "$f" | grep -E 'Compiling|Used|spill'
  done
  echo "== NVRTC"
  grep -E '^==|dkdv|Used|spill' "$logs/nvrtc-registers.log" | head -40
  for cubin in hopper_bwd.d64.f0 hopper_bwd.d128.f0 hopper_bwd_ws.d64 hopper_bwd_ws.d128 hopper_bwd_pp.d64 \
    hopper_bwd_pp.d128 hopper_bwd_det.d128.w0 hopper_bwd_det.d64.w1; do
    cuobjdump -sass -fun attnlab_flash_bwd_dkdv "$logs/$cubin.cubin" > "$logs/$cubin.dkdv.sass"
    printf '%s dkdv SASS:' "$cubin"
    for op in HGMMA UBLKRED 'REDG| RED\.' UTMALDG LDGSTS 'LDL' 'STL' 'BAR\.SYNC' 'SYNCS' 'USETMAXREG' 'STS\.64' \
      'STRONG\.GPU' NANOSLEEP; do
      printf ' %s=%s' "$op" "$(grep -cE "$op" "$logs/$cubin.dkdv.sass")"
    done
    echo
  done
  ;;
test)
  # Thirteen processes at once, sharing one kernel cache: each compiles the modules its cases need (one
  # NVRTC compile of hopper_bwd.cu takes ~7 s of an idle core), so a cold cache costs the step once.
  f=test/gpu/backward/hopper.test.ts
  for dtype in bfloat16 float16; do
    for loop in wgmma wgmma-ws; do
      shard "$loop-$dtype" - --test-name-pattern="^(?!repeat).* · $dtype( · deterministic)? · $loop\$" $f
    done
  done
  # The deterministic repeats, one shape and loop a process (20 runs each, no float64 oracle).
  for loop in wgmma wgmma-ws; do
    shard "repeat-small-$loop" - --test-name-pattern="^repeat · (GQA|T=300 ).* · $loop\$" $f
    shard "repeat-s40000-$loop" - --test-name-pattern="^repeat · T=128 S=40000.* · $loop\$" $f
    shard "repeat-t20480-$loop" - --test-name-pattern="^repeat · T=S=20480.* · $loop\$" $f
    shard "repeat-t2000-$loop" - --test-name-pattern="^repeat · T=2000 .* · $loop\$" $f
  done
  shard flash-backward - test/gpu/backward/flash.test.ts
  wait
  summary 20 24 20
  ;;
check)
  # Both wgmma loops (wgmma, the default at H=96 and 128; wgmma-ws, the default at 64), thirteen processes at
  # once; each test's result streams to its log, so a process cut at the cap still says which tests passed.
  f=test/gpu/backward/hopper.test.ts
  export KERNELS=hopper/hopper_bwd.cu
  plain_ws="ATTNLAB_FLASH_BWD_KERNEL=wgmma-ws ATTNLAB_FLASH_BWD_WS_FLAGGED=0 ATTNLAB_FLASH_BWD_DQ_SWIZZLE=0 ATTNLAB_FLASH_BWD_STATS_EARLY=0 ATTNLAB_FLASH_BWD_PINGPONG=0"
  for loop in ${CHECK_LOOPS:-wgmma wgmma-ws}; do
    shard "$loop-bf16" - --test-name-pattern="^(?!repeat|deterministic).* · bfloat16 · $loop\$" $f
    shard "$loop-fp16-det" - --test-name-pattern="^(?!repeat)(.* · float16|deterministic .* · deterministic) · $loop\$" $f
    case $loop in
    wgmma | wgmma-ws)
      shard "$loop-repeat" - --test-name-pattern="^repeat · (GQA|T=128 S=40000|T=2000 ).* · $loop\$" $f ;;
    plain-ws | pingpong)
      vars=$plain_ws
      [ $loop = pingpong ] && vars="ATTNLAB_FLASH_BWD_KERNEL=wgmma-ws ATTNLAB_FLASH_BWD_PINGPONG=1"
      shard "nan-$loop" "$vars" test/gpu/backward/nan.test.ts
      shard "flash-nan-$loop" "$vars" --test-name-pattern='^NaN in ' test/gpu/backward/flash.test.ts
      ;;
    esac
    sanitize_all "$loop-d128" --test-name-pattern="^T=257 S=257 H=128 causal · bfloat16 · $loop\$" $f
    if [ $loop = pingpong ]; then
      for tool in memcheck racecheck; do
        sanitize "$tool-$loop-d64" $tool --test-name-pattern="^T=S=128 H=64 causal · bfloat16 · $loop\$" $f
      done
    fi
  done
  sanitize memcheck-det-d128 memcheck \
    --test-name-pattern='^deterministic T=S=257 H=128 causal · bfloat16 · deterministic · wgmma$' $f
  wait
  summary 20 28 20
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
sanitize-det)
  # The ordered dQ adds of deterministic mode (hopper/bwd_dq_order.cuh): descending order at H=128, a window
  # and padding lengths at H=64.
  for tool in memcheck racecheck synccheck; do
    sanitize $tool-det-d128 $tool --test-name-pattern='^deterministic T=S=257 H=128 causal' \
      test/gpu/backward/hopper.test.ts
    sanitize $tool-det-d64 $tool --test-name-pattern='^deterministic T=257 S=300 H=64' test/gpu/backward/hopper.test.ts
  done
  wait
  summary 16 24 20
  ;;
loops)
  for H in ${HS:-128 64 96}; do
    # shellcheck disable=SC2086
    timeout "${LOOP_CAP:-28}" node --import tsx benchmarks/harnesses/backward-loop-variants.ts 4 8192 16 $H \
      ${SPECS:-wgmma wgmma-ws mma wgmma+det wgmma-ws+det}
  done 2>&1 | tee "$logs/loops.txt"
  ;;
sweep)
  # T from 1k to 32k at B·T = 32k, N=16, H=SWEEP_H (128): the default loop, deterministic, and attnlab's cudnn in
  # one process per T (benchmarks/harnesses/backward-loop-variants.ts), SWEEP_CAP seconds each.
  for T in ${SWEEP_TS:-1024 2048 4096 8192 16384 32768}; do
    # shellcheck disable=SC2086
    timeout "${SWEEP_CAP:-14}" node --import tsx benchmarks/harnesses/backward-loop-variants.ts $((32768 / T)) "$T" 16 \
      "${SWEEP_H:-128}" ${SPECS:-wgmma wgmma+det cudnn}
  done 2>&1 | tee "$logs/sweep.txt"
  ;;
bench)
  # BENCH_ARGS adds options, e.g. "--head-dim 64": the suite at one head dim (a shorter call).
  timeout $cap node bin/attnlab.js bench --suite backward --impl flash,cudnn --peers torch --out "$logs/bench" \
    --no-progress ${BENCH_ARGS:-} 2>&1 | tee "$logs/bench${BENCH_ARGS:+-${BENCH_ARGS// /}}.txt" | tail -40
  ;;
profile)
  ncu=ncu
  command -v $ncu > /dev/null || ncu=/usr/local/cuda/bin/ncu
  H=${PROFILE_H:-128}
  for loop in ${PROFILE_LOOPS:-wgmma}; do
    rep="$logs/ncu-$loop-d$H"
    # The first launch of the dK/dV kernel is the harness's non-causal one.
    timeout "$cap" $ncu --clock-control none --set full --import-source no -k attnlab_flash_bwd_dkdv -c 1 -f -o "$rep" \
      node --import tsx benchmarks/harnesses/backward-loop-variants.ts --profile 4 8192 16 "$H" "$loop" \
      > "$rep.log" 2>&1
    echo "rc=$?" >> "$rep.log"
    $ncu -i "$rep.ncu-rep" --page details > "$rep.txt" 2>&1
    $ncu -i "$rep.ncu-rep" --page source --csv --print-source sass > "$rep-sass.csv" 2>&1
    echo "== $loop H=$H ($(tail -1 "$rep.log"))"
    grep -E 'Duration|Throughput|Pipe|Issue Slots|Stall|Warp Cycles|Bank|Wavefronts|Registers|Occupancy' "$rep.txt" | head -70
  done
  ;;
*)
  echo "unknown step $step (sass, test, check, suite, sanitize, sanitize-det, loops, sweep, bench, profile)" >&2
  exit 2
  ;;
esac
