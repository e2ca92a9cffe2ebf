#!/usr/bin/env bash
# One device call for the Hopper kernel: build the harness with the machine's nvcc, list the Hopper
# instructions in its SASS, run the checks, the compute-sanitizer tools on small cases, and the
# timings; logs to $1 (default $OUT), a short table last. Usage: bash bench/hopper/device-run.sh [out] [steps]
set -u
out=${1:-$OUT}; shift || true
steps=${*:-build sass check sanitize time}
export PATH=/usr/local/cuda/bin:$PATH
bin=$out/harness
summary=()
step() { local name=$1 limit=$2; shift 2; local t0=$SECONDS
  timeout --kill-after=5 "$limit" "$@" > "$out/$name.log" 2>&1; local rc=$?
  summary+=("$(printf '%-10s rc=%-3s %4ss' "$name" "$rc" "$((SECONDS - t0))")"); }
for s in $steps; do case $s in
  build) step build 120 nvcc -O2 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I src/kernels -Xptxas -v \
      -o "$bin" bench/hopper/harness.cu ;;
  sass) step sass 60 bash -c "cuobjdump --dump-sass '$bin' | grep -oE 'HGMMA[.A-Z0-9x]*|UTMALDG[.A-Z0-9]*|USETMAXREG[.A-Z0-9]*|SYNCS[.A-Z0-9]*|HMMA[.A-Z0-9]*' | sort | uniq -c" ;;
  check) step check 150 "$bin" check ;;
  sanitize) for tool in memcheck racecheck synccheck; do
      step "$tool" 90 compute-sanitizer --tool "$tool" --error-exitcode 9 "$bin" sanitize; done ;;
  time) step time 120 "$bin" time ;;
esac; done
echo "== sass"; cat "$out/sass.log" 2>/dev/null | head -20
echo "== failures"; grep -h "FAIL\|failures\|ERROR SUMMARY\|RACECHECK SUMMARY\|error" "$out"/check.log "$out"/memcheck.log "$out"/racecheck.log "$out"/synccheck.log 2>/dev/null | head -40
echo "== build"; grep -E "error|C75" "$out/build.log" | head -5
echo "== time"; cat "$out/time.log" 2>/dev/null
printf '%s\n' "${summary[@]}"
