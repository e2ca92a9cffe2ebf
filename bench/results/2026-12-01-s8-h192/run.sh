#!/usr/bin/env bash
# Session 8, h192's device call (issue 14's remaining head dims): the Hopper kernel's D=192 (three
# 64-column boxes, BN=112) and its key/value head dims of different box counts (192/128, 128/64,
# 256/128, 64/256, 160/96) through the library's GPU suites against the float64 oracle, three
# sanitizers on one D=192 and one Hv≠H case, the SASS of the D=192 cubin, then alone on the GPU the
# H=192 headline (B=4, T=S=8192, N=16, bf16, causal and not): the Hopper kernel, attnlab's cudnn and
# the mma.sync kernel in one run (bench/hopper/s6-bench.ts --quick --head-dims=192 --no-peers).
# From a tree copy (.wt-h192) beside main's .device and .kcache, all carried:
#   cd .wt-h192 && ATTNLAB_COMMIT=<commit> bash ../.device/on-gpu.sh \
#     bash bench/results/2026-12-01-s8-h192/run.sh "$OUT" [test cap s, default 130] [bench cap s, default 75]
# bin/hopper_d192.cubin (nvcc here: sm_90a, the library's -D set for H=192 bf16) is carried for cuobjdump.
set -u
out=${1:?output folder}
cap=${2:-130}
bench_cap=${3:-75}
export NO_COLOR=1 ATTNLAB_CACHE_DIR=/tmp/attnlab-h192-cache
export ATTNLAB_COMMIT=${ATTNLAB_COMMIT:-unknown}
mkdir -p "$ATTNLAB_CACHE_DIR" /tmp/h192-logs
logs=/tmp/h192-logs
[ -f ../.kcache/kernels.tar.xz ] && tar -C "$ATTNLAB_CACHE_DIR" -xJf ../.kcache/kernels.tar.xz
echo "seeded $(ls "$ATTNLAB_CACHE_DIR/kernels" 2> /dev/null | grep -c cubin) cached kernels"
source scripts/gpu-lib.sh # shard, sanitize, summary
export PATH=/usr/local/cuda/bin:$PATH

# 1. The new cases, one process per group (NVRTC compiles in parallel). flash-hopper.test.ts names them
# `H=192 …`, `H=160 …` (padded to 192), `H/Hv=<H>/<Hv> …`; the NaN, bit-identity and mma.sync-fallback
# tests run every head dim pair they list.
hopper=test/gpu/flash-hopper.test.ts
shard hopper-192-bf16 - --test-name-pattern='^H=192 .*\(bfloat16\)$' $hopper
shard hopper-192-f16 - --test-name-pattern='^H=192 .*\(float16\)$' $hopper
shard hopper-160 - --test-name-pattern='^H=160 ' $hopper
shard hopper-mixed-192 - --test-name-pattern='^H/Hv=(192|160)/' $hopper
shard hopper-mixed-128 - --test-name-pattern='^H/Hv=128/' $hopper
shard hopper-mixed-256-64 - --test-name-pattern='^H/Hv=(256|64)/' $hopper
shard hopper-nan - --test-name-pattern='^(keeps NaN|makes a query row)' $hopper
shard hopper-bits - --test-name-pattern='^gives bit-identical' $hopper
shard hopper-fallback - --test-name-pattern='^runs the cases it does not cover' $hopper
# The shared matrix's new LONG_CASES (`H=192 causal GQA`, `H=160 Hv=96 padding + window`) through
# flash.test.ts on the Hopper kernel (bf16, fp16), on mma.sync (every precision: float32/tf32 run the FMA
# kernel), and through the other suites that read LONG_CASES (cudnn, naive, backward's `flash long`), so
# the lead's full verify meets no surprise.
new_cases='^H=(192 causal GQA|160 Hv=96 padding \+ window) · '
shard flash-wgmma ATTNLAB_FLASH_KERNEL=wgmma --test-name-pattern="$new_cases"'(bfloat16|float16)$' test/gpu/flash.test.ts
shard flash-mma ATTNLAB_FLASH_KERNEL=mma --test-name-pattern="$new_cases" test/gpu/flash.test.ts
shard cudnn-naive - --test-name-pattern="$new_cases" test/gpu/cudnn.test.ts test/gpu/naive.test.ts
shard backward-long - --test-name-pattern="$new_cases"'bfloat16 · flash long$' test/gpu/backward.test.ts
# 2. Sanitizers on one D=192 case (causal, several tiles) and one Hv≠H case (192/128 with padded keys:
# the V rows zeroed in shared memory, three K boxes against two V boxes).
sanitized='^(H=192 T=S=700 causal|H/Hv=192/128 \(key and value dims of their own\) padding lengths, a batch with no keys) \(bfloat16\)$'
for tool in memcheck racecheck synccheck; do
  sanitize "$tool-hopper" "$tool" --test-name-pattern="$sanitized" $hopper
done
# 3. SASS of the D=192 kernel: wgmma (HGMMA) of N=112 and N=192, TMA loads (UTMALDG), setmaxnreg.
if [ -f bin/hopper_d192.cubin ]; then
  cuobjdump -sass bin/hopper_d192.cubin > $logs/d192.sass 2>&1
  { echo "HGMMA by shape:"; grep -oE 'HGMMA\.64x[0-9]+x16[.A-Z0-9]*' $logs/d192.sass | sort | uniq -c
    echo "UTMALDG $(grep -c UTMALDG $logs/d192.sass), USETMAXREG $(grep -c USETMAXREG $logs/d192.sass), MUFU.EX2 $(grep -c MUFU.EX2 $logs/d192.sass)"; } > $logs/d192-sass.txt
  gzip -f $logs/d192.sass
fi
wait
echo "tests done at ${SECONDS} s"
# 4. Alone on the GPU: the H=192 headline, flash (Hopper) / attnlab cudnn / flash mma.sync, same run.
timeout --kill-after=5 "$bench_cap" node --import tsx bench/hopper/s6-bench.ts "$out/h200-s8-h192.json" --quick \
  --head-dims=192 --no-peers > $logs/bench.txt 2>&1
echo "bench rc=$? at ${SECONDS} s"
tar -C $logs -cf - . | xz -T8 -6 > "$out/logs.tar.xz"
summary 22 20 20
cat $logs/d192-sass.txt 2> /dev/null
tail -8 $logs/bench.txt
