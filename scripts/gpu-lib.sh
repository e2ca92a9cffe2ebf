# Functions for the device scripts (scripts/gpu-verify.sh and others): test shards
# and sanitizer runs as background processes with a hard cap each, and their summary table. Sourced,
# not run. The sourcing script sets, before it calls them:
#   logs  the folder that gets one <name>.tap (test shard) or <name>.san (sanitizer run) per process
#   cap   seconds each process may run: `timeout --kill-after=5`, since a kernel that hangs ignores SIGTERM
#   only  (optional) a bash regex: shards and sanitizer runs whose names it does not match are skipped
#         (scripts/gpu-verify.sh's third argument)
# and then `wait`s for them. Sourcing sets `san`, the compute-sanitizer to use.
san=compute-sanitizer
command -v $san > /dev/null || san=/usr/local/cuda/bin/compute-sanitizer
# Results made on the device name the commit pack-device.sh packed: the device's copy of the tree may hold a stale
# .git of its own (a bench JSON said 9f6f22b-dirty for beb1504), which attnlabCommit would read.
export ATTNLAB_COMMIT=${ATTNLAB_COMMIT:-$(cat .device/commit 2>/dev/null || echo unknown)}

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
# call (`VAR=value sanitize …`): bash exports them to the processes the function starts; SANITIZER_ARGS
# adds options of compute-sanitizer's own (e.g. leaving a library's kernels out).
sanitize() { # name, tool, node --test arguments... → $logs/<name>.san, its rc last
  local name=$1 tool=$2
  [ -n "${only:-}" ] && ! [[ $name =~ $only ]] && return
  shift 2
  (
    timeout --kill-after=5 "$cap" $san --tool "$tool" --error-exitcode 9 --print-limit 20 ${SANITIZER_ARGS:-} \
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
