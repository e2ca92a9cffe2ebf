#!/usr/bin/env bash
# The whole GPU suite in one device call, sharded so that it ends inside the call's limit, with the
# sanitizer checks beside it. Run through .device/on-gpu.sh (made by `sh scripts/pack-device.sh`) from the
# project root:
#   bash .device/on-gpu.sh bash scripts/gpu-verify.sh "$OUT" [cap seconds, default 300] [only: a bash regex of
#   the shard and sanitizer names to run, e.g. 'decode' after a change to the decode path alone; test files with no
#   shard of their own run in the shard named `rest`]
# Why sharded: NVRTC compiles of the kernel variants dominate (flash.test.ts alone took ~186 s in one
# process); each shard is its own process, so the 16 cores compile in parallel. One top-level
# suite per shard prints its results when it ends, so a shard cut at the cap loses only itself.
# Kernel cache: every shard shares one ATTNLAB_CACHE_DIR (writes are temp + rename, safe across
# processes). A cache carried in .kcache/kernels.tar.xz seeds it, and the cache at the end comes back as
# $OUT/kernels.tar.xz, so the next call compiles only what changed (the key hashes every source). It holds
# the cuDNN plans too (cudnn-plans/, keyed by cuDNN version, GPU and graph): a plan built cold took 2.9 s
# once, one loaded from disk 34 ms — what makes a bench's first calls cheap on a fresh machine.
set -u
out=${1:?usage: gpu-verify.sh <output folder> [cap seconds] [only]}
cap=${2:-300}
only=${3:-}
export NO_COLOR=1 ATTNLAB_CACHE_DIR=/tmp/attnlab-verify-cache
export ATTNLAB_COMMIT=${ATTNLAB_COMMIT:-$(cat .device/commit 2>/dev/null || echo unknown)}
mkdir -p "$ATTNLAB_CACHE_DIR"
[ -f .kcache/kernels.tar.xz ] && tar -C "$ATTNLAB_CACHE_DIR" -xJf .kcache/kernels.tar.xz
echo "seeded $(ls "$ATTNLAB_CACHE_DIR/kernels" 2>/dev/null | grep -c cubin) cached kernels"
mkdir -p "$out"
logs=$out  # the shards' and sanitizers' logs (deleted after archiving)
source "$(dirname "${BASH_SOURCE[0]}")/gpu-lib.sh"  # shard, sanitize, summary
source "$(dirname "${BASH_SOURCE[0]}")/gpu-steps.sh"  # step groups other device scripts run too

# Every other file (a new test file lands here without an edit) in one node --test, files in parallel.
# hidden-host.test.ts times calls against bounds: it runs alone after the others (the `timing` shard below).
rest=$(find test/gpu -name '*.test.ts' | sort |
  grep -vE '/(forward/(flash|hopper|nan)|backward/backends|decode/(flash|tma)|bench/hidden-host)\.test\.ts$')
shard rest - $rest
# decode-tma.test.ts in three: the two forms × 6 cache layouts × 4 split counts (144 calls, ~8
# TMA variants to compile cold), one form a shard, the rest (fp16, NaN, the defaults, the decode loop) a third.
shard decode-tma-1 - --test-name-pattern=', 1 row group\(s\), ' test/gpu/decode/tma.test.ts
shard decode-tma-2 - --test-name-pattern=', 2 row group\(s\), ' test/gpu/decode/tma.test.ts
# row groups as two-CTA clusters with multicast copies, the third form, a fourth shard.
shard decode-tma-mc - --test-name-pattern=', clustered row groups, ' test/gpu/decode/tma.test.ts
# The measured defaults (float64 oracles at 1M-token shapes, ~100 s warm) apart from the rest (cut when cold).
shard decode-tma-defaults - --test-name-pattern='^runs ' test/gpu/decode/tma.test.ts
shard decode-tma - \
  --test-name-pattern='^(?!.*(, [12] row group\(s\), |, clustered row groups, )|runs |forced$|flash decode, TMA kernel$|<root>$)' \
  test/gpu/decode/tma.test.ts
# flash-hopper.test.ts in four processes: D=192 and the Dk ≠ Dv pairs add (~17 more Hopper
# variants to compile cold; 71 tests in nine shards took 33 s in h192's call), too many for one shard's cap.
# The complement excludes the suite's name and node's root, as decode's third shard does.
shard hopper-192 - --test-name-pattern='^H=(160|192) ' test/gpu/forward/hopper.test.ts
shard hopper-dk-dv - --test-name-pattern='^H/Hv=' test/gpu/forward/hopper.test.ts
# H=64/128 in a fourth, beside the dynamic grid's cases (float64 references of ~1.4e9 multiply-adds).
shard hopper-64-128 - --test-name-pattern='^H=(64|128) ' test/gpu/forward/hopper.test.ts
shard hopper - --test-name-pattern='^(?!H=(64|128|160|192) |H/Hv=|cuda flash: the Hopper kernel$|<root>$)' \
  test/gpu/forward/hopper.test.ts
for p in float32 bfloat16 float16; do
  shard "flash-$p" - --test-name-pattern="· $p\$" test/gpu/forward/flash.test.ts
done
shard flash-other - --test-name-pattern='other tile configurations|^cuda flash kernel$' test/gpu/forward/flash.test.ts
# The Hopper kernel in place of the mma.sync one wherever it runs: HOPPER_BY_DEFAULT's condition.
wgmma_type_shards
wgmma_other_shard
shard nan - test/gpu/forward/nan.test.ts
shard backward-flash - --test-name-pattern='· flash$' test/gpu/backward/backends.test.ts
shard backward-flash-more - --test-name-pattern='· flash (long|deterministic|random deterministic)$' \
  test/gpu/backward/backends.test.ts
shard backward-other - --test-name-pattern='^GPU attention backward( · (bfloat16|float16|float32))?$' \
  test/gpu/backward/backends.test.ts
# The cases shaped after the peers' backward tests (gradient-cases.ts): float32 naive, bfloat16 naive/cudnn/flash.
shard backward-gradient-cases - --test-name-pattern='· gradient cases$' test/gpu/backward/backends.test.ts
# The default flash backward on sm_90a runs its dK/dV loop on wgmma at padded H=64 and 128; the same suite with
# ATTNLAB_FLASH_BWD_KERNEL=mma keeps the mma.sync loop (other GPUs, other head dims) covered at H=64 and 128 too.
shard backward-flash-mma ATTNLAB_FLASH_BWD_KERNEL=mma --test-name-pattern='· flash$' test/gpu/backward/backends.test.ts
shard backward-flash-mma-more ATTNLAB_FLASH_BWD_KERNEL=mma \
  --test-name-pattern='· flash (long|deterministic|random deterministic)$' test/gpu/backward/backends.test.ts
shard flash-backward-mma ATTNLAB_FLASH_BWD_KERNEL=mma test/gpu/backward/flash.test.ts
# decode.test.ts in three processes: with 116 tests it ran past a 150 s cap as one shard
# (159 s alone on a warm machine). Its six "forced …" suites split by kernel family; the third takes
# everything else. A suite whose name matches runs all its tests, and node's root test is `<root>`, so
# the complement excludes the suites, their tests' names and both roots (checked with node 20's runner).
shard decode-forced-loaders - --test-name-pattern='^forced (bulk|async) loader' test/gpu/decode/flash.test.ts
shard decode-forced-kernels - --test-name-pattern='^forced (heads|rows) kernel' test/gpu/decode/flash.test.ts
# the third (117 s alone, warm) was cut at 240 s in a cold call (benchmarks/results/h200/decode/2026-12-02-1m-tokens-k1-multicast),
# so the cases over the layouts ("dense: …", "paged (blockSize n): …", 63 s of it) are a fourth.
shard decode-cases - --test-name-pattern='^(dense|paged \(blockSize \d+\)): ' test/gpu/decode/flash.test.ts
shard decode - \
  --test-name-pattern='^(?!forced |dense: |paged \(blockSize \d+\): |dense and paged 16: |flash decode kernel$|<root>$)' \
  test/gpu/decode/flash.test.ts
# Kernels no sanitizer has seen yet: the flat-scan NaN repair (nan_repair.cu), the FP8 requantise
# (quantise.cu), the ring's log-sum-exp merge (lse_merge.cu); the Hopper kernel under racecheck/synccheck.
sanitize memcheck-nan-repair memcheck --test-name-pattern='cudnn bfloat16' test/gpu/forward/nan.test.ts
sanitize memcheck-fp8 memcheck test/gpu/fp8/forward.test.ts
sanitize memcheck-decode memcheck --test-name-pattern='window' test/gpu/decode/flash.test.ts
sanitize memcheck-ring memcheck --test-name-pattern='^flash .*P=2$' test/gpu/context-parallel/ring.test.ts
# racecheck on the row-tile decode kernel and on the default (wgmma) flash backward; memcheck
# on the FP8 backward's dO quantise / gradient dequantise (fp8/gradients.cu).
sanitize racecheck-decode racecheck --test-name-pattern='window' test/gpu/decode/flash.test.ts
# the TMA decode kernel's row groups and grouped boxes (dense and pages of 8…256) and its
# programmatic dependent launches, under memcheck and racecheck: the window case at 3 splits.
for tool in memcheck racecheck; do
  sanitize "$tool-decode-tma" "$tool" --test-name-pattern='^window .*, ([12] row group\(s\)|clustered row groups), 3 splits' \
    test/gpu/decode/tma.test.ts
done
# the TMA kernel with 4 rows a kv head and eight kv heads a token (the rule's K=8 case);
# its one-block form runs one row tile of 8 warps there (decode-tma.ts, oneBlockRowTiles), under all three tools.
for tool in memcheck racecheck synccheck; do
  sanitize "$tool-decode-tma-gqa" "$tool" \
    --test-name-pattern='^GQA 4:1, K=8 .*, ([12] row group\(s\)|clustered row groups), 3 splits' \
    test/gpu/decode/tma.test.ts
done
# the TMA kernel merging its own splits (split counters, the last block's merge; decodeTuning.combine
# 'fused' at 2 and 17 splits, the combine kernel at 3).
for tool in memcheck racecheck synccheck; do
  sanitize "$tool-decode-tma-fused" "$tool" --test-name-pattern='^merges the splits' test/gpu/decode/tma.test.ts
done
# split calls under 1 GiB launch as programmatic dependents by default (decode-tma.ts,
# tmaDependentLaunches): the window case at 3 splits under synccheck too, the decode loop of appends (every
# ATTNLAB_DEPENDENT_LAUNCH value) under memcheck, and the host-hidden timing's spin kernel (gpu_spin.cu).
sanitize synccheck-decode-tma synccheck --test-name-pattern='^window .*, ([12] row group\(s\)|clustered row groups), 3 splits' \
  test/gpu/decode/tma.test.ts
sanitize memcheck-decode-loop memcheck --test-name-pattern='^a decode loop of appends' test/gpu/decode/tma.test.ts
# The spin's test asserts its time too (2 ms within bounds), which memcheck's slowdown can break (3.4 ms seen):
# what this run answers is its ERROR SUMMARY.
sanitize memcheck-gpu-spin memcheck --test-name-pattern='^spinGpu' test/gpu/bench/hidden-host.test.ts
sanitize racecheck-flash-backward racecheck --test-name-pattern=sanitize test/gpu/backward/flash.test.ts
# The backward's other kernels under all three tools, on two cases of the gradient NaN suite (naive, cudnn and
# flash each): naive's softmax backward and non-finite passes (softmax_backward.cu) and the gradient NaN repair
# after cuDNN (grad_nan_repair.cu: dQ, dK, dV rows and dBias elements recomputed, warp shuffles and ballots);
# widen.cu under memcheck through float32Output's float32 forward (the peaked case).
# cuDNN's own backward kernels are left out of racecheck and synccheck: on an H100 (cuDNN 9.19) racecheck reports
# 13 hazards inside cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16 and synccheck makes it fail to
# launch (err 719) — a library's kernels, not attnlab's; memcheck keeps them in (0 errors there).
for tool in memcheck racecheck synccheck; do
  args=; [ $tool != memcheck ] && args='--kernel-name-exclude kns=cudnn_generated'
  SANITIZER_ARGS=$args sanitize "$tool-backward-nan" "$tool" \
    --test-name-pattern='^(NaN key, causal: the rows that see it|NaN bias entry: that row) · bfloat16$' \
    test/gpu/backward/nan.test.ts
done
sanitize memcheck-widen memcheck --test-name-pattern='^peaked \(inputs ×10\)$' test/gpu/backward/peaked.test.ts
sanitize memcheck-fp8-gradients memcheck --test-name-pattern='bit for bit' test/gpu/fp8/backward.test.ts
for tool in racecheck synccheck; do
  ATTNLAB_FLASH_KERNEL=wgmma sanitize "$tool-hopper" "$tool" --test-name-pattern='^H=128 (?!long).*\(bfloat16\)$' \
    test/gpu/forward/hopper.test.ts
  # the three-consumer D=128 tile of long T (192 rows × 80 keys), one case.
  ATTNLAB_FLASH_KERNEL=wgmma sanitize "$tool-hopper-long" "$tool" \
    --test-name-pattern='^H=128 long T: T=8192 S=300 MQA \(bfloat16\)$' test/gpu/forward/hopper.test.ts
done
# memcheck on that tile, and the dynamic persistent grid under all three (gpu-steps.sh).
hopper_dynamic_sanitizers
wait
# The host-hidden timer's tests assert times (a 300 µs spin within 290–400 µs; a call with 200 µs of host timed
# plainly at ≥ 190 µs), and ~50 processes sharing the GPU time-slice it: one run's spin read
# 425 µs, another's (least of three) 433 µs and the plain one 183 µs (its start event ran late).
# They run here, alone on a quiet GPU, as `npm run test:gpu`'s few processes would.
shard timing - test/gpu/bench/hidden-host.test.ts
wait
echo "all shards done at ${SECONDS} s"
# At most 8 files come back from $OUT: the logs travel as one archive, the cache as another.
tar -C "$ATTNLAB_CACHE_DIR" -cf - $(cd "$ATTNLAB_CACHE_DIR" && ls -d kernels cudnn-plans 2>/dev/null) | xz -T8 -6 \
  > "$out/kernels.tar.xz"
tar -C "$out" -cf - $(cd "$out" && ls *.tap *.san) | xz -T8 -6 > "$out/logs.tar.xz"
ls -la "$out/kernels.tar.xz" "$out/logs.tar.xz"
echo "== summary (tests pass fail skipped, rc; sanitizers: summary line)"
summary 18 24 30
rm -f "$out"/*.tap "$out"/*.san
