#!/usr/bin/env bash
# The flash backward with a bias, a boolean mask, score/mask modifiers and block masks on a Hopper GPU, one
# step per call (each under 90 s), logs under $2:
#   sass      (also run by `test`, beside its shards) nvcc -Xptxas -v of hopper/hopper_bwd.cu behind the hand-written modifier sets (document mask +
#             block mask, softcap, ALiBi) and with a bias (dBias added or stored) or a mask (16-byte rows and byte by byte), D=128 bf16,
#             and the dK/dV kernel's SASS counts (HGMMA, LDG, LDL/STL spills, RED: dBias and captures)
#   test      test/gpu/variants/flash.test.ts in parallel shards: every case on the wgmma loop against float64
#             (the `wgmma: ` tests), and the mma.sync loop's (`mma: `) beside them
#   verify    the wgmma loop's cases that cover each hook, one process a case: document mask + block mask,
#             ALiBi and softcap at H=64; the (B,1,T,S) mask (16-byte rows), the (1,1,1,S) key mask at S=520
#             (rows ending byte by byte), the full (B,N,T,S) bf16 bias (dBias stored), with a window (stored
#             into a zeroed buffer), the (1,N,T,S) float32 bias over the batch (added, batch groups) at T=384;
#             the block-mask equivalence at T=1024; the public API's generated modifiers (ALiBi + documents,
#             softcap); the generated functions against the CPU evaluator (codegen.test.ts)
#   warm      compiles, beside the checks, what the timed steps run (the backward harness at a small shape,
#             flex_attention at the timed one)
#   sanitize  memcheck, racecheck and synccheck on the wgmma loop: a document mask with its block mask and a
#             softcap (H=64, T=384, N=4, K=2), and the fused backward of a (B,1,T,S) boolean mask (16-byte rows,
#             and deterministic) and of a full bf16 bias (dBias)
#   ceiling   benchmarks/harnesses/hbm-read-ceiling.cu at 4 GiB: what a bare read of B·N·T·S mask bytes takes
#   dense     variants-backward.ts dense (the fused bias/mask backward against naive and the ceiling), with
#             ATTNLAB_READ_GBPS from the ceiling step's plain-load rate when its log is there
#   masks, scores   variants-backward.ts masks / scores (documents, causal as an expression, ALiBi, softcap)
#   backward  variants-backward.ts backward: the flash backward alone of every case (one forward module),
#             ATTNLAB_DEBUG=3 so that each module's compile time goes to the log; CASES=0,1,… picks cases
#   flex-masks, flex-scores   benchmarks/harnesses/flex-attention-backward.py on the same cases (PyTorch's
#             compiled flex_attention backward)
#   profile   Nsight Compute on the first backward of each case in CASES (the backward step's numbering;
#             default 4,2: the 8 documents, the (1,N,T,S) bias): each kernel's duration at the boost clock,
#             and the dK/dV loop's speed of light, memory workload, warp states and scheduler — where the
#             time goes, one log a case
#
#   bash scripts/gpu-variants-backward.sh STEP "$OUT/vbwd"
set -u
step=$1
logs=${2:-out}
mkdir -p "$logs"
logs=$(cd "$logs" && pwd)  # absolute: the nvcc builds run from src/kernels
cap=${CAP:-85}  # seconds per process
# attnlab's default kernel cache: what earlier commands on the machine compiled serves these too.
source scripts/gpu-lib.sh
suite=test/gpu/variants/flash.test.ts

sass() {
  # The hand-written modifier sets of test/support/modifier-cases.ts as headers (the generator's shape).
  node --import tsx -e '
    import("./test/support/modifier-cases.ts").then((m) => {
      const fs = require("node:fs");
      const shape = { B: 2, T: 256, S: 256, N: 4 };
      for (const [name, c] of [["doc", m.documentCase(shape, 4, 1, true)], ["softcap", m.softcapCase(30)],
                               ["alibi", m.alibiCase(shape)]])
        fs.writeFileSync(process.argv[1] + "/mods-" + name + ".cuh", c.source);
    });' "$logs"
  cd src/kernels || exit 1
  build() { # name, nvcc -D/-include options
    local name=$1
    shift
    nvcc -cubin -gencode=arch=compute_90a,code=sm_90a -std=c++17 -Xptxas -v -I . -DFLASH_D=128 -DFLASH_FP16=0 "$@" \
      -o "$logs/$name.cubin" hopper/hopper_bwd.cu > "$logs/ptxas-$name.log" 2>&1 &
  }
  build plain
  build doc-bmask -include "$logs/mods-doc.cuh" -DATTNLAB_BLOCK_MASK=1
  build softcap -include "$logs/mods-softcap.cuh"
  build alibi -include "$logs/mods-alibi.cuh"
  build bias-bf16 -DFLASH_BIAS=2
  build bias-bf16-store -DFLASH_BIAS=2 -DFLASH_DBIAS_STORE=1
  build mask-rows -DFLASH_MASK=1 -DFLASH_MASK_ROWS=1
  build mask-bytes -DFLASH_MASK=1
  wait
  for name in plain doc-bmask softcap alibi bias-bf16 bias-bf16-store mask-rows mask-bytes; do
    printf '== %s: ' "$name"
    grep -A2 "entry function 'attnlab_flash_bwd_dkdv'" "$logs/ptxas-$name.log" | grep -E 'Used|spill' | tr -s ' \n' ' '
    cuobjdump -sass -fun attnlab_flash_bwd_dkdv "$logs/$name.cubin" > "$logs/$name.dkdv.sass"
    for op in HGMMA 'LDG' 'LDL' 'STL' 'RED' 'SHFL'; do
      printf '%s=%s ' "$op" "$(grep -cE "$op" "$logs/$name.dkdv.sass")"
    done
    echo
  done
}

case $step in
sass) sass ;;
test)
  # The nvcc builds (CPU only) beside the shards: the GPU's machine has 16 cores.
  (sass > "$logs/sass.txt" 2>&1) &
  # Each modifier case compiles ~3 modules cold (~4 s each): masks and scores apart, a head dim a shard.
  for h in 64 128; do
    shard wgmma-masks-$h - --test-name-pattern="^wgmma: (causal|sliding|document).*H=$h: forward" $suite
    shard wgmma-scores-$h - --test-name-pattern="^wgmma: (ALiBi|softcap|relative).*H=$h: forward" $suite
  done
  shard wgmma-dense-384 - --test-name-pattern='^wgmma: fused backward .*T=384' $suite
  shard wgmma-dense-520 - --test-name-pattern='^wgmma: fused backward .*T=520' $suite
  shard wgmma-other - --test-name-pattern='^wgmma: (a block mask|public API)' $suite
  shard mma-mods-64 - --test-name-pattern='^mma: (?!fused).*H=64: forward' $suite
  shard mma-mods-128 - --test-name-pattern='^mma: (?!fused).*H=128: forward' $suite
  shard mma-other - --test-name-pattern='^mma: (a block mask|public API)' $suite
  shard mma-dense - --test-name-pattern='^mma: fused' $suite
  wait
  summary 16 16 20
  ;;
verify)
  # One case a shard: on a cold kernel cache each compiles its forward and backward modules (~16 s each for
  # the backward with modifiers), and the shards compile side by side.
  for c in document ALiBi softcap; do
    shard "verify-$c" - --test-name-pattern="^wgmma: $c.*H=64: forward" $suite
  done
  dense='^wgmma: fused backward with a'
  shard verify-mask - --test-name-pattern="$dense \\(B,1,T,S\\) boolean mask, B=2 T=384" $suite
  shard verify-key-mask - --test-name-pattern="$dense \\(1,1,1,S\\) boolean key mask, B=1 T=520" $suite
  shard verify-bias - --test-name-pattern="$dense full \\(B,N,T,S\\) bf16 bias, B=2 T=384" $suite
  shard verify-bias-window - --test-name-pattern="$dense \\(B,N,T,S\\) bf16 bias and a .*, B=2 T=384" $suite
  shard verify-bias-shared - --test-name-pattern="$dense \\(1,N,T,S\\) float32 bias .*, B=2 T=384" $suite
  shard verify-bmask - --test-name-pattern='^wgmma: a block mask skips' $suite
  shard verify-api - --test-name-pattern='^wgmma: public API' $suite
  shard verify-codegen - test/gpu/variants/codegen.test.ts
  wait
  summary 16 16 20
  ;;
warm)
  # Compiles what the timed steps run, beside the checks: every backward module of `backward` (its cases at
  # B=2 T=256 are the variants of B=4 T=8192) and PyTorch's flex_attention kernels of FLEX_CASES (default
  # sdpa-causal,document,alibi,softcap; torch.compile keeps them on disk, shape-specialised: at the timed shape).
  # A few cases a process (WARM_CASES, groups split by spaces): ~16 s of NVRTC a backward module, serial
  # within a process.
  for c in ${WARM_CASES:-0,3 1 4 6 7 8,2}; do
    (ATTNLAB_HARNESS_CASES=$c timeout "$cap" node --import tsx benchmarks/harnesses/variants-backward.ts backward \
      2 256 16 128 > "$logs/warm-backward-$c.log" 2>&1
    echo "rc=$?" >> "$logs/warm-backward-$c.log") &
  done
  # WARM_FLEX=0 leaves flex_attention out (a call that times no flex step).
  if [ "${WARM_FLEX:-1}" != 0 ]; then
    (timeout "$cap" python3 benchmarks/harnesses/flex-attention-backward.py \
      "${FLEX_CASES:-sdpa-causal,document,alibi,softcap}" > "$logs/warm-flex.log" 2>&1
    echo "rc=$?" >> "$logs/warm-flex.log") &
  fi
  wait
  tail -n 2 "$logs"/warm-*.log
  ;;
sanitize)
  for tool in memcheck racecheck synccheck; do
    sanitize "$tool-doc" "$tool" --test-name-pattern='^wgmma: document mask .*H=64: forward' $suite
    sanitize "$tool-softcap" "$tool" --test-name-pattern='^wgmma: softcap .*H=64: forward' $suite
    sanitize "$tool-mask" "$tool" --test-name-pattern='^wgmma: fused backward with a \(B,1,T,S\) boolean mask, B=2 T=384' $suite
    sanitize "$tool-bias" "$tool" --test-name-pattern='^wgmma: fused backward with a full \(B,N,T,S\) bf16 bias, B=2 T=384' $suite
  done
  wait
  summary 16 20 20
  ;;
ceiling)
  nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -o /tmp/read-ceiling benchmarks/harnesses/hbm-read-ceiling.cu &&
    timeout "$cap" /tmp/read-ceiling 4096 | tee "$logs/read-ceiling.log"
  ;;
dense | masks | scores)
  if [ "$step" = dense ] && [ -z "${ATTNLAB_READ_GBPS:-}" ] && [ -f "$logs/read-ceiling.log" ]; then
    # The fastest plain-load reader's GB/s at 4096 MiB (the harness's `ldg …  4096 MiB … GB/s` rows).
    ATTNLAB_READ_GBPS=$(grep -E '^ldg .* 4096 MiB' "$logs/read-ceiling.log" | grep -oE '[0-9.]+ GB/s' | sort -n |
      tail -1 | cut -d' ' -f1)
    export ATTNLAB_READ_GBPS
  fi
  timeout "$cap" node --import tsx benchmarks/harnesses/variants-backward.ts "$step" | tee "$logs/variants-backward-$step.log"
  ;;
backward)
  ATTNLAB_DEBUG=3 ATTNLAB_HARNESS_CASES=${CASES:-} timeout "$cap" node --import tsx \
    benchmarks/harnesses/variants-backward.ts backward 2>&1 | tee "$logs/variants-backward-backward${CASES:+-$CASES}.log"
  ;;
profile)
  IFS=, read -ra picked <<< "${CASES:-4,2}"
  for c in "${picked[@]}"; do
    ATTNLAB_HARNESS_CASES=$c timeout "$cap" ncu --clock-control none -k regex:attnlab_flash_bwd -c 4 \
      --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
      node --import tsx benchmarks/harnesses/variants-backward.ts backward > "$logs/ncu-case-$c.txt" 2>&1
    echo "case $c: exit $? ($logs/ncu-case-$c.txt)"
  done
  ;;
flex-masks | flex-scores)
  # FLEX_CASES=alibi,softcap (the harness's case names) runs a few of the part's cases: each compiles its own
  # kernels, tens of seconds cold.
  timeout "$cap" python3 benchmarks/harnesses/flex-attention-backward.py "${FLEX_CASES:-${step#flex-}}" |
    tee "$logs/$step${FLEX_CASES:+-${FLEX_CASES//,/-}}.jsonl"
  ;;
*)
  echo "step: sass, test, verify, warm, sanitize, ceiling, dense, masks, scores, backward, profile, flex-masks or flex-scores; got $step" >&2
  exit 2
  ;;
esac
