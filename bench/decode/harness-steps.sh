# Steps the harness's device calls share (sourced by bench/decode/s8-call1.sh and s9-call1.sh, from the
# worktree copy's root): the harness built where it was not carried, a sanitizer run of `check quick
# heads` in the background, and PyTorch's SDPA (cuDNN, flash) on dense caches for same-call ratios.
# Every process under its own SIGKILL limit: a kernel that hangs ignores SIGTERM.
harness_san=compute-sanitizer
command -v $harness_san > /dev/null || harness_san=/usr/local/cuda/bin/compute-sanitizer
harness_t0=$SECONDS

harness_build() { # out, limit: nvcc as the scripts' headers say (~15 s in session 8, ~35 s with session 9's variants)
  [ -x bench/decode/harness ] && return
  timeout -s KILL "$2" nvcc -O2 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I src/kernels \
    -DDECODE_SPIN_LIMIT=16777216 -Xptxas -v -o bench/decode/harness bench/decode/harness.cu > "$1/build.log" 2>&1
  echo "build rc=$? $((SECONDS - harness_t0))s"
}

harness_sanitize() { # log, tool, cases (the first n of check's), limit: in the background (`wait` for it)
  (timeout -s KILL "$4" $harness_san --tool "$2" --error-exitcode 9 ./bench/decode/harness check quick heads "$3" \
    > "$1" 2>&1; echo "rc=$? $2 $((SECONDS - harness_t0))s" >> "$1") &
}

harness_torch() { # out, limit, cases: a JSON list of {"B","S","K"} (N=32, H=128 added), 30 repeats
  timeout -s KILL "$2" /opt/torch/.venv/bin/python bench/decode/torch_decode.py \
    "{\"cases\": $(echo "$3" | sed 's/}/,"N":32,"H":128}/g'), \"repeats\": 30}" > "$1/torch.json" 2> "$1/torch.err"
  echo "torch rc=$? $((SECONDS - harness_t0))s"
}

harness_check_bench() { # out, sanitizer logs' folder, check limit, bench limit: the check beside the
  # sanitizers started before, then (the GPU to itself) the bench twice for the run-to-run spread
  timeout -s KILL "$3" ./bench/decode/harness check > "$1/check.log" 2>&1
  echo "check rc=$? $((SECONDS - harness_t0))s: $(tail -1 "$1/check.log")"
  wait
  cat "$2"/*.san > "$1/sanitizers.log"
  for r in 1 2; do
    timeout -s KILL "$4" ./bench/decode/harness bench > "$1/bench$r.log" 2>&1
    echo "bench$r rc=$? $((SECONDS - harness_t0))s"
  done
}

harness_summary() { # out, variant prefix (persist, ws): check and sanitizer lines for the tables' call
  echo "== check"; grep -cE '^ok' "$1/check.log"; grep -E '^FAIL|^check:' "$1/check.log" | head -20
  grep -E " $2[0-9]" "$1/check.log" | awk '{print $1}' | sort | uniq -c
  echo "== sanitizers"; grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY|^check:|^rc=|^FAIL' "$1/sanitizers.log" | head -20
}
