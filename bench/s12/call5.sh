#!/usr/bin/env bash
# Session 12, call 5 (bench only, main as verified by call 4): (1) B=1 decode through the compiled library
# (dist/, what `attnlab` and an npm user run; the benches so far ran the sources through tsx, whose
# keepNames wrapping costs host time on every closure made) and through tsx, in the same call: host µs a
# call and GB/s per call and kernels alone; (2) the TMA kernel at B=64 S=16k K=4 and K=1 with programmatic
# dependent launches on and off: at K=4 its per-call rows read 6% under its kernels-alone rows (call 3).
#   bash .device/on-gpu.sh bash bench/s12/call5.sh "$OUT"   (.device, .kcache and dist carried)
set -u
out=${1:?output folder}
export NO_COLOR=1 ATTNLAB_CACHE_DIR=/tmp/attnlab-s12-cache
export ATTNLAB_COMMIT=${ATTNLAB_COMMIT:-$(cat .device/commit 2>/dev/null || echo unknown)}
mkdir -p "$ATTNLAB_CACHE_DIR" "$out/runs"
[ -f .kcache/kernels.tar.xz ] && tar -C "$ATTNLAB_CACHE_DIR" -xJf .kcache/kernels.tar.xz
cp bench/decode/torch_decode.py dist/bench/decode/  # decode-bench finds its peer beside itself
py=/opt/torch/.venv/bin/python
run() { # name, cap (s), how to start decode-bench (dist or tsx), its arguments
  local name=$1 cap=$2 how=$3
  shift 3
  local entry=(node dist/bench/decode/decode-bench.js)
  [ "$how" = tsx ] && entry=(node --import tsx bench/decode/decode-bench.ts)
  timeout --kill-after=5 "$cap" "${entry[@]}" --out "$out/runs/$name.json" --no-uncached "$@" 2>&1 |
    grep -v "UserWarning\|call = lambda" > "$out/runs/$name.txt"
  echo "$name rc=${PIPESTATUS[0]} at ${SECONDS} s"
}
small=1:2048:1,1:8192:1,1:32768:1,1:2048:8
run dist 120 dist --torch $py --impl flash,cudnn --layouts dense,paged16 --shapes $small
run tsx 90 tsx --torch none --impl flash,cudnn --layouts dense,paged16 --shapes $small
ATTNLAB_DEPENDENT_LAUNCH=1 run pdl1 60 dist --torch none --impl flash --shapes 64:16384:4,64:16384:1
run pdl0 60 dist --torch none --impl flash --shapes 64:16384:4,64:16384:1
tar -C "$out" -cJf "$out/runs.tar.xz" runs
python3 bench/s12/table.py "$out/runs" > "$out/table.txt"
rm -rf "$out/runs"
cat "$out/table.txt"
