#!/usr/bin/env bash
# Session 11: `auto` at B=64 S=16k K=1 dense read 3078 / 2975 GB/s where `flash` read 4094 / 4113 with the same
# kernel, twice (bench/results/2026-12-02-s11-final). Host vs device time per call (bench/s11/auto-host.ts) and
# the decode bench in another order (auto before and after cudnn), each with programmatic dependent launches
# on and off (ATTNLAB_DEPENDENT_LAUNCH=0).
#   bash .device/on-gpu.sh bash bench/s11/auto-check.sh "$OUT"   (.device and .kcache carried)
set -u
out=${1:?output folder}
export ATTNLAB_CACHE_DIR=/tmp/attnlab-auto-cache NO_COLOR=1
export ATTNLAB_COMMIT=${ATTNLAB_COMMIT:-$(cat .device/commit 2>/dev/null || echo unknown)}
mkdir -p "$ATTNLAB_CACHE_DIR"
[ -f .kcache/kernels.tar.xz ] && tar -C "$ATTNLAB_CACHE_DIR" -xJf .kcache/kernels.tar.xz
for dep in 1 0; do
  ATTNLAB_DEPENDENT_LAUNCH=$dep timeout --kill-after=5 60 node --import tsx bench/s11/auto-host.ts \
    > "$out/host-dep$dep.txt" 2>&1
  echo "host dep=$dep rc=$?"
  ATTNLAB_DEPENDENT_LAUNCH=$dep timeout --kill-after=5 60 node --import tsx bench/decode/decode-bench.ts \
    --out "$out/bench-dep$dep.json" --torch none --impl auto,flash,cudnn,auto,flash --layouts dense,paged64 \
    --shapes 64:16384:1 > "$out/bench-dep$dep.txt" 2>&1
  echo "bench dep=$dep rc=$?"
done
for dep in 1 0; do
  echo "== dependent launches $dep"
  grep round "$out/host-dep$dep.txt"
  grep -h "K=1" "$out/bench-dep$dep.txt"
done
