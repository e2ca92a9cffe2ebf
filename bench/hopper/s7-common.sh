# The steps session 7's second and third device calls (s7-call2.sh, s7-call3.sh) share. Sourced, not
# run; the calling script sets out (the output folder), harness (the harness binary) and deadline first.
# Both calls ran before this file was split out of them: call 2 from the tree of 9bf96c9, call 3 from
# 7bfe35b (on main as e7a58c0), each with its own full copy of these lines
# (bench/results/2026-12-01-s7-hopper/README.md). To reproduce one exactly, check out that commit:
# scripts/gpu-lib.sh has changed since, and scripts/gpu-steps.sh (gpu-verify.sh's steps) came after.

# Logs folder, CUDA's tools, the shared kernel cache seeded from ../.kcache, gpu-lib's helpers.
s7_setup() { # default cap (s)
  logs=$out/logs
  mkdir -p "$logs"
  export PATH=/usr/local/cuda/bin:$PATH
  export NO_COLOR=1 ATTNLAB_CACHE_DIR=/tmp/attnlab-s7-cache ATTNLAB_COMMIT=${ATTNLAB_COMMIT:-s7-hopper-wip}
  mkdir -p "$ATTNLAB_CACHE_DIR"
  [ -f ../.kcache/kernels.tar.xz ] && tar -C "$ATTNLAB_CACHE_DIR" -xJf ../.kcache/kernels.tar.xz
  cap=${TEST_CAP:-$1}
  source scripts/gpu-lib.sh # shard, sanitize, summary; sets san
  source scripts/gpu-steps.sh # wgmma_type_shards, wgmma_other_shard: the steps gpu-verify.sh runs
}

# flash-hopper.test.ts of the current tree in four shards, named <prefix>-h64, -h128, -h256, -rest.
s7_hopper_shards() { # prefix
  for H in 64 128 256; do shard "$1-h$H" - --test-name-pattern="^H=$H " test/gpu/flash-hopper.test.ts; done
  shard "$1-rest" - --test-name-pattern='^H=(96|48|120) |bit-identical|NaN|does not cover' test/gpu/flash-hopper.test.ts
}

# In the background: the harness's oracle check, then its sanitize mode under the three sanitizers.
s7_harness_checks() { # check mode, sanitize mode, sanitizer cap (s)
  ( timeout --kill-after=5 $cap "$harness" "$1" > "$logs/harness-$1.log" 2>&1
    echo "rc=$?" >> "$logs/harness-$1.log"
    for tool in memcheck racecheck synccheck; do
      timeout --kill-after=5 "$3" $san --tool "$tool" --error-exitcode 9 --print-limit 20 "$harness" "$2" \
        > "$logs/harness-$tool.san" 2>&1
      echo "rc=$?" >> "$logs/harness-$tool.san"
    done ) &
}

# The harness's timing mode alone on the GPU → $out/<mode>.log.
s7_harness_time() { # time mode, cap (s)
  timeout --kill-after=5 "$2" "$harness" "$1" > "$out/$1.log" 2>&1
  echo "harness $1 rc=$? at ${SECONDS} s"
}

# The kernel cache for the next call, then the harness check's counts and its first failures.
s7_cache_and_check_summary() { # check mode, summary name width
  tar -C "$ATTNLAB_CACHE_DIR" -cf - kernels cudnn-plans 2> /dev/null | xz -T8 -3 > "$out/kernels.tar.xz"
  echo "== correctness (pass fail; rc)"
  summary 16 "$2" 12
  local c=$logs/harness-$1.log
  echo "harness $1: $(grep -c '^PASS' "$c") pass, $(grep -c '^FAIL' "$c") fail, $(grep -c '^SAME' "$c") same, $(grep -c '^DIFF' "$c") diff; $(tail -2 "$c" | tr '\n' ' ')"
  grep -E '^(FAIL|DIFF)' "$c" | head -5
}

s7_time_table() { # time mode
  echo "== harness $1"
  sed -E 's/ +/ /g; s/wgmma\.//; s/\.overlap\.pingpong//; s/ median=/ /' "$out/$1.log" | cut -c1-110
}
