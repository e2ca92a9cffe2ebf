#!/usr/bin/env bash
# Session 10's second decode call: call 2 found the TMA loader ALONE (consumers only release the stages,
# .lo) capped at 3.71 TB/s (B=64 S=16k K=1 dense) with ncu's L2 throughput at 85% against DRAM at 78%, and
# the grouped boxes no better. Here, loader-only and with the consumers: the maps' L2 promotion (HARNESS_L2:
# 256 the library's, 128, none), unswizzled whole 256-byte rows (.raw, loader only), more splits (4, 8: all
# 132 SMs busy), and ncu of the loader alone and of the heads kernel at K=8 (4.2 TB/s) for comparison.
#   device: run(carry: [".wt-decode"], command: "cd .wt-decode && bash bench/decode/s10-call3.sh", timeout_s: 240)
set -u
dest=${OUT:-/tmp/out}
out=/tmp/s10-logs
mkdir -p "$dest" "$out"
t0=$SECONDS
export HARNESS_ONLY=tma1.4x32.s3f HARNESS_SHAPES=64:16384:1,128:8192:1 HARNESS_SPLITS=4,8
for l2 in 256 128 none 64; do
  HARNESS_L2=$l2 timeout -s KILL 40 ./bench/decode/harness bench > "$out/bench-l2$l2.log" 2>&1
  echo "bench l2=$l2 rc=$? $((SECONDS - t0))s"
done
HARNESS_L2=256 timeout -s KILL 40 ./bench/decode/harness bench > "$out/bench-l2256b.log" 2>&1
unset HARNESS_SHAPES HARNESS_SPLITS
M=dram__bytes_read.sum.per_second,lts__t_sector_hit_rate.pct,lts__t_sectors_srcunit_tex.sum,lts__t_sectors.sum,lts__d_sectors_fill_sysmem.sum,lts__d_sectors_fill_device.sum,lts__t_requests_srcunit_tex.sum,lts__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sectors_srcnode_gpc.sum,lts__t_sectors_srcunit_ltcfabric.sum
prof() { # name, args…
  local n=$1; shift
  timeout -s KILL 60 ncu --clock-control none -k regex:"$K" --launch-skip 8 --launch-count 1 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis_Chart --section MemoryWorkloadAnalysis_Tables --metrics $M \
    ./bench/decode/harness bench one "$@" > "$out/ncu-$n.txt" 2>&1
  echo "ncu $n rc=$? $((SECONDS - t0))s"
}
K=h_ws_tma prof lo-256 64 16384 1 0 tma1.4x32.s3f.lo
K=h_ws_tma HARNESS_L2=none prof lo-none 64 16384 1 0 tma1.4x32.s3f.lo
K=h_ws_tma prof raw-256 64 16384 1 0 tma1.4x32.s3f.raw.lo
K=h_heads HARNESS_ONLY=none prof heads-k8 64 16384 8 16 heads
echo "== GB/s by L2 promotion (run b: 256 again)"
for f in "$out"/bench-l2*.log; do l=$(basename $f .log); grep -E "^(64|128) " $f | awk -v l=${l#bench-} '{print l, $1, $2, $4, $5, $7, $9}'; done > "$out/table.txt"
awk '{k=$2" "$3" "$4" "$5" "$6; a[k]=a[k]" "$1"="$7} END{for(k in a) print k, a[k]}' "$out/table.txt" | sort -k1,1n -k3,3 -k4,4 -k5,5n | grep -vE "heads|async|bulk"
for f in "$out"/ncu-*.txt; do echo "== $f"; grep -E "DRAM Throughput|L2 Cache Throughput|L1/TEX Cache|Duration|lts__|dram__" "$f" | head -16; done
tar -czf "$dest/logs.tgz" -C "$out" . && echo "total $((SECONDS - t0))s"
