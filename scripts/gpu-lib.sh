# Functions for the device scripts (scripts/gpu-verify.sh and others): test shards
# and sanitizer runs as background processes with a hard cap each, and their summary table. Sourced,
# not run. The sourcing script sets, before it calls them:
#   logs  the folder that gets one <name>.tap (test shard) or <name>.san (sanitizer run) per process
#   cap   seconds each process may run: `timeout --kill-after=5`, since a kernel that hangs ignores SIGTERM
#   only  (optional) what to run: `tests` (the shards), `sanitizers` (the sanitizer runs), or a bash regex of
#         the names to run (scripts/gpu-verify.sh's third argument)
#   jobs_max (optional) how many processes run at once, default the machine's cores
# and then `wait`s for them. Sourcing sets `san`, the compute-sanitizer to use.
san=compute-sanitizer
command -v $san > /dev/null || san=/usr/local/cuda/bin/compute-sanitizer
# Results made on the device name the commit pack-device.sh packed: the device's copy of the tree may hold a stale
# .git of its own (a bench JSON said 9f6f22b-dirty for beb1504), which attnlabCommit would read.
export ATTNLAB_COMMIT=${ATTNLAB_COMMIT:-$(cat .device/commit 2>/dev/null || echo unknown)}
# Each shard writes every test's result as it ends (test/support/stream-results.ts), so a shard cut at the cap
# still says which tests passed.
node_test=(node --import tsx --import ./test/support/stream-results.ts --test --test-reporter=tap)

# Whether a run of this name and kind (shard or sanitizer) is asked for.
wanted() { # name, kind
  case "${only:-}" in
    '') return 0 ;;
    tests) [ "$2" = shard ] ;;
    sanitizers) [ "$2" = sanitizer ] ;;
    *) [[ $1 =~ $only ]] ;;
  esac
}

# Waits for a slot: at most jobs_max processes at once. ~60 processes started together on 16 cores run at a
# quarter of a core each, and the longest shards (NVRTC compiles and float64 oracles, all CPU) reach their cap;
# a queue lets each run near full speed, so its cap measures its own work.
slot() {
  while [ "$(jobs -rp | wc -l)" -ge "${jobs_max:-$(nproc)}" ]; do wait -n; done
}

shard() { # name, "VAR=value ..." (or -), node --test arguments... → $logs/<name>.tap, its rc last
  local name=$1 vars=$2
  wanted "$name" shard || return 0
  shift 2
  [ "$vars" = - ] && vars=
  slot
  (
    start=$SECONDS
    env $vars timeout --kill-after=5 "$cap" "${node_test[@]}" "$@" > "$logs/$name.tap" 2>&1
    rc=$?
    echo "# wall $((SECONDS - start)) s" >> "$logs/$name.tap"
    echo "rc=$rc" >> "$logs/$name.tap"
  ) &
}

# One small test pattern each: the sanitizers slow kernels ~10-100x. Variables for the run go before the
# call (`VAR=value sanitize …`): bash exports them to the processes the function starts; SANITIZER_ARGS
# adds options of compute-sanitizer's own (e.g. leaving a library's kernels out); KERNELS names the files
# under src/kernels/ the run launches, for the coverage table (test/unit/scripts/sanitizer-coverage.test.ts
# fails when a kernel file has no memcheck, racecheck and synccheck run naming it).
sanitize() { # name, tool, node --test arguments... → $logs/<name>.san, its rc last
  local name=$1 tool=$2
  wanted "$name" sanitizer || return 0
  shift 2
  [ -n "${KERNELS:-}" ] && echo "$tool $name $KERNELS" >> "$logs/sanitized-kernels.txt"
  slot
  (
    start=$SECONDS
    { [ -n "${KERNELS:-}" ] && echo "# kernels: $KERNELS"; } > "$logs/$name.san"
    ATTNLAB_SANITIZER=$tool timeout --kill-after=5 "$cap" $san --tool "$tool" --error-exitcode 9 --print-limit 20 ${SANITIZER_ARGS:-} \
      "${node_test[@]}" "$@" >> "$logs/$name.san" 2>&1
    rc=$?
    echo "# wall $((SECONDS - start)) s" >> "$logs/$name.san"
    echo "rc=$rc" >> "$logs/$name.san"
  ) &
}

# The three tools on one test pattern, as <tool>-<name>. RACE_SYNC_ARGS: compute-sanitizer options for
# racecheck and synccheck only (cuDNN's own kernels left out there: see gpu-verify.sh).
sanitize_all() { # name, node --test arguments...
  local name=$1 tool
  shift
  for tool in memcheck racecheck synccheck; do
    if [ $tool = memcheck ]; then
      sanitize "$tool-$name" $tool "$@"
    else
      SANITIZER_ARGS="${SANITIZER_ARGS:-} ${RACE_SYNC_ARGS:-}" sanitize "$tool-$name" $tool "$@"
    fi
  done
}

# Passed, failed and skipped tests of a log: node's totals, or the results it wrote before it was cut (node's
# runner, stopped by the cap's SIGTERM, may print no totals); a `cut` mark for a process the cap ended.
counts() { # log file
  if grep -qE '^# pass ' "$1"; then
    grep -E '^# (pass|fail|skipped) ' "$1" | awk '{printf "%s=%s ", $2, $3}'
  else
    awk '/^ *ok [0-9]+ - .*# SKIP/ {s++; next} /^ *ok [0-9]+ - / {p++} /^ *not ok [0-9]+ - / {f++}
      END {printf "pass=%d fail=%d skipped=%d ", p, f, s}' "$1"
  fi
  grep -qE '^rc=(124|137)$' "$1" && printf 'cut '
}

summary() { # shard name width, sanitizer name width, most "not ok" lines: one line per log of $logs
  local f
  for f in "$logs"/*.tap; do
    [ -e "$f" ] || continue
    printf "%-${1}s %s %s %s\n" "$(basename "$f" .tap)" "$(counts "$f")" \
      "$(grep -E '^# wall ' "$f" | awk '{printf "%ss", $3}')" "$(tail -1 "$f")"
  done
  for f in "$logs"/*.san; do
    [ -e "$f" ] || continue
    printf "%-${2}s %s %s %s\n" "$(basename "$f" .san)" "$(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY' "$f" | tr '\n' ' ')" \
      "$(counts "$f")" "$(grep -E '^# wall ' "$f" | awk '{printf "%ss", $3}') $(tail -1 "$f")"
  done
  grep -hE '^\s*not ok' "$logs"/*.tap "$logs"/*.san 2> /dev/null | head -"$3"
}
