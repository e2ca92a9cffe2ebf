# Helpers for the device scripts (scripts/gpu-verify.sh and other device scripts): test shards
# and sanitizer runs as background processes with a hard cap each, and their summary table. Sourced,
# not run. The sourcing script sets, before it calls them:
#   logs  the folder that gets one <name>.tap (test shard) or <name>.san (sanitizer run) per process
#   cap   seconds each process may run: `timeout --kill-after=5`, since a kernel that hangs ignores SIGTERM
#   only  (optional) a bash regex: shards and sanitizer runs whose names it does not match are skipped
#         (scripts/gpu-verify.sh's third argument)
# and then `wait`s for them. Sourcing sets `san`, the compute-sanitizer to use. harness_binary picks the
# Hopper harness to run (carried, or built on the device).
san=compute-sanitizer
command -v $san > /dev/null || san=/usr/local/cuda/bin/compute-sanitizer
# Results made on the device name the commit pack-device.sh packed: the device's copy of the tree may hold a stale
# .git of its own (a bench JSON said 9f6f22b-dirty for beb1504), which attnlabCommit would read.
export ATTNLAB_COMMIT=${ATTNLAB_COMMIT:-$(cat .device/commit 2>/dev/null || echo unknown)}

# The standalone Hopper harness (benchmarks/harnesses/hopper-forward-kernel.cu) as carried, or built here when the carried
# binary does not start (built off the device, it may not load): prints the path to use.
harness_binary() { # carried binary, log file
  if timeout -s KILL 20 "$1" none >> "$2" 2>&1; then
    echo "$1"
    return
  fi
  echo "carried harness $1 failed to start; building /tmp/harness" >> "$2"
  timeout -s KILL 150 nvcc -O2 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I src/kernels \
    -o /tmp/harness benchmarks/harnesses/hopper-forward-kernel.cu >> "$2" 2>&1 || echo "harness build failed" >> "$2"
  echo /tmp/harness
}

# The start of a harness run: sets logs=<folder>/logs (made), CUDA's tools
# on PATH, and bin, the harness to run (harness_binary).
harness_call() { # output folder, carried harness binary
  logs=$1/logs
  mkdir -p "$logs"
  export PATH=/usr/local/cuda/bin:$PATH
  bin=$(harness_binary "$2" "$logs/run.log")
}

shard() { # name, "VAR=value ..." (or -), node --test arguments... → $logs/<name>.tap, its rc last
  local name=$1 vars=$2
  [ -n "${only:-}" ] && ! [[ $name =~ $only ]] && return
  shift 2
  [ "$vars" = - ] && vars=
  (
    env $vars timeout --kill-after=5 "$cap" node --import tsx --test --test-reporter=tap "$@" > "$logs/$name.tap" 2>&1
    echo "rc=$?" >> "$logs/$name.tap"
  ) &
}

# One small test pattern each: the sanitizers slow kernels ~10-100x. Variables for the run go before the
# call (`VAR=value sanitize …`): bash exports them to the processes the function starts.
sanitize() { # name, tool, node --test arguments... → $logs/<name>.san, its rc last
  local name=$1 tool=$2
  [ -n "${only:-}" ] && ! [[ $name =~ $only ]] && return
  shift 2
  (
    timeout --kill-after=5 "$cap" $san --tool "$tool" --error-exitcode 9 --print-limit 20 \
      node --import tsx --test --test-reporter=tap "$@" > "$logs/$name.san" 2>&1
    echo "rc=$?" >> "$logs/$name.san"
  ) &
}

summary() { # shard name width, sanitizer name width, most "not ok" lines: one line per log of $logs
  local f
  for f in "$logs"/*.tap; do
    printf "%-${1}s %s %s\n" "$(basename "$f" .tap)" \
      "$(grep -E '^# (pass|fail|skipped)' "$f" | awk '{printf "%s=%s ", $2, $3}')" "$(tail -1 "$f")"
  done
  for f in "$logs"/*.san; do
    printf "%-${2}s %s %s\n" "$(basename "$f" .san)" "$(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY' "$f" | tr '\n' ' ')" \
      "$(grep -E '^# (pass|fail)' "$f" | awk '{printf "%s=%s ", $2, $3}') $(tail -1 "$f")"
  done
  grep -hE '^\s*not ok' "$logs"/*.tap "$logs"/*.san | head -"$3"
}

# A decode bench call through the compiled library (bench/s13/call2.sh): decode_call sets the cache and commit
# exports, unpacks the carried kernel cache, puts the PyTorch peer beside dist's decode-bench and starts
# nvidia-smi logging temperatures, power and clocks every 200 ms (SMI_MS) into $runs/smi.csv; decode_run runs one
# decode-bench (its rows to $runs/<name>.json and .txt); decode_end stops the logging, prints every run's rows
# (bench/s12/table.py) and packs $runs into runs.tar.xz (8 files come back from $OUT).
decode_call() { # output folder → runs=<folder>/runs
  export NO_COLOR=1 ATTNLAB_CACHE_DIR=/tmp/attnlab-decode-cache
  decode_out=$1 runs=$1/runs
  mkdir -p "$ATTNLAB_CACHE_DIR" "$runs"
  [ -f .kcache/kernels.tar.xz ] && tar -C "$ATTNLAB_CACHE_DIR" -xJf .kcache/kernels.tar.xz
  cp benchmarks/harnesses/decode_torch_peer.py dist/bench/decode/
  nvidia-smi --format=csv,noheader -lms "${SMI_MS:-200}" --query-gpu=timestamp,temperature.gpu,temperature.memory,power.draw,clocks.sm,clocks.mem,clocks_event_reasons.active,utilization.gpu \
    > "$runs/smi.csv" 2>&1 &
  decode_smi=$!
}
decode_run() { # name, cap (s), decode-bench arguments
  local name=$1 cap=$2
  shift 2
  timeout --kill-after=5 "$cap" node dist/bench/decode/decode-bench.js --out "$runs/$name.json" --no-uncached "$@" 2>&1 |
    grep -v "UserWarning\|call = lambda" > "$runs/$name.txt"
  echo "$name rc=${PIPESTATUS[0]} at ${SECONDS} s"
}
decode_end() {
  kill "$decode_smi"
  python3 bench/s12/table.py "$runs" > "$runs/table.txt"
  tar -C "$decode_out" -cJf "$decode_out/runs.tar.xz" runs
  cp "$runs/table.txt" "$decode_out/"
  grep -v efficien "$decode_out/table.txt"
  grep -h '"uuid"' "$runs"/*.json | sort | uniq -c
}

# The start and end every device script repeats: call_start sets logs=<folder>/tests
# (made), the kernel cache folder (ATTNLAB_CACHE_DIR, seeded from a carried .kcache/kernels.tar.xz, a previous
# call's), NO_COLOR, and prints the time and the GPU; call_save_cache packs that cache into <folder>/kernels.tar.xz
# for the next call's .kcache.
call_start() { # output folder, kernel cache folder
  logs=$1/tests
  mkdir -p "$logs" "$2"
  export NO_COLOR=1 ATTNLAB_CACHE_DIR=$2
  [ -f .kcache/kernels.tar.xz ] && tar -C "$ATTNLAB_CACHE_DIR" -xJf .kcache/kernels.tar.xz
  date -u
  nvidia-smi --query-gpu=name,uuid,power.limit --format=csv,noheader
}
call_save_cache() { # output folder
  tar -C "$ATTNLAB_CACHE_DIR" -cf - $(cd "$ATTNLAB_CACHE_DIR" && ls -d kernels cudnn-plans 2>/dev/null) |
    xz -T8 -6 > "$1/kernels.tar.xz"
}

# The start of a decode-harness call (bench/s18/call*.sh): CUDA's tools on PATH, <folder>/h made, the time and
# the GPU printed, and bin, the harness to run: the carried tmp/harness (built off the device: nvcc -O2 -std=c++17
# -gencode=arch=compute_90a,code=sm_90a -I src/kernels -DDECODE_SPIN_LIMIT=16777216 -o tmp/harness
# benchmarks/harnesses/decode-kernel.cu), or one built here when it does not start (its usage message exits 2).
decode_harness_call() { # output folder
  export PATH=/usr/local/cuda/bin:$PATH
  mkdir -p "$1/h"
  date -u
  nvidia-smi --query-gpu=name,uuid,power.limit --format=csv,noheader
  bin=tmp/harness
  timeout -s KILL 20 $bin none > /dev/null 2>&1
  if [ $? -ne 2 ]; then
    echo "carried harness does not start: building"
    timeout -s KILL 150 nvcc -O2 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I src/kernels \
      -DDECODE_SPIN_LIMIT=16777216 -o /tmp/harness benchmarks/harnesses/decode-kernel.cu > "$1/h/build.log" 2>&1
    bin=/tmp/harness
  fi
}
# The harness's check of the regs kernels (HARNESS_ONLY=regs) into <folder>/h/check.txt, its summary and failures
# printed; decode_harness_sanitize runs each compute-sanitizer tool named over `check quick` (its first 4 cases).
decode_harness_check() { # output folder
  HARNESS_ONLY=regs timeout -s KILL 120 $bin check > "$1/h/check.txt" 2>&1
  echo "check rc=$? at ${SECONDS} s: $(tail -1 "$1/h/check.txt")"
  grep -v '^ok' "$1/h/check.txt" | head -10
}
decode_harness_sanitize() { # output folder, tools...
  local out=$1 tool
  shift
  for tool in "$@"; do
    HARNESS_ONLY=regs timeout -s KILL 150 compute-sanitizer --tool $tool --error-exitcode 9 --print-limit 20 \
      $bin check quick x 4 > "$out/h/$tool.txt" 2>&1
    echo "$tool rc=$? at ${SECONDS} s: $(tail -2 "$out/h/$tool.txt" | tr '\n' ' ')"
  done
}
# benchmarks/harnesses/hbm-read-ceiling.cu built on the device as /tmp/read-ceiling (its log to the file named), for the calls
# that do not carry tmp/read-ceiling (bench/s17/call2.sh, call3.sh) or whose carried one does not start (s18/call4.sh).
read_ceiling_build() { # build log file
  timeout -s KILL 120 nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -o /tmp/read-ceiling \
    benchmarks/harnesses/hbm-read-ceiling.cu > "$1" 2>&1 || echo "read-ceiling build failed"
}
