#!/bin/bash
# The webgpu backend on the GPU machine's NVIDIA Vulkan driver: the correctness suites, then the
# timings of scripts/webgpu-timing.ts. Logs go to $1 (default ./webgpu-gpu-out); $2 picks the
# stage: device (info and device tests, ~15 s), suite (~30 s), timing (~40 s), bench (attnlab
# bench --impl webgpu,flash on the forward shape, ~40 s), or all (default: the first three).
# Usage, from the repo root: bash .device/on-gpu.sh bash scripts/webgpu-gpu.sh "$OUT/webgpu" suite
#
# Dawn needs a Vulkan loader (libvulkan.so.1). Where the machine has none, .deb files under .gl/
# (e.g. `apt-get download libvulkan1` run into .gl/ on the CPU machine and carried) are unpacked.
set -u
out=${1:-webgpu-gpu-out}
stage=${2:-all}
mkdir -p "$out"
if ! ldconfig -p | grep -q 'libvulkan.so.1 '; then
  for f in .gl/*.deb; do [ -f "$f" ] && dpkg -x "$f" /; done
  ldconfig
fi
ldconfig -p | grep 'libvulkan.so.1 ' > "$out/loader.txt" 2>&1 || echo "no libvulkan.so.1: carry .gl/ with libvulkan1's .deb" > "$out/loader.txt"
icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
if [ -z "${VK_DRIVER_FILES:-}" ] && [ -f "$icd" ]; then export VK_DRIVER_FILES=$icd; fi
if [ "$stage" = device ] || [ "$stage" = all ]; then
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$out/gpu.txt" 2>&1
  timeout 30 node --import tsx src/cli/bin.ts info > "$out/info.txt" 2>&1
  timeout 60 node --import tsx --test test/cpu/webgpu-device.test.ts > "$out/device-tests.log" 2>&1
  echo "rc=$?" >> "$out/device-tests.log"
fi
if [ "$stage" = suite ] || [ "$stage" = all ]; then
  timeout 85 node --import tsx --test test/cpu/webgpu-suite.test.ts > "$out/suite.log" 2>&1
  echo "rc=$?" >> "$out/suite.log"
fi
if [ "$stage" = timing ] || [ "$stage" = all ]; then
  timeout 85 node --import tsx scripts/webgpu-timing.ts --reps 5 > "$out/timing.jsonl" 2> "$out/timing.err"
  echo "rc=$?" >> "$out/timing.err"
fi
if [ "$stage" = bench ]; then
  timeout 85 node --import tsx src/cli/bin.ts bench --impl webgpu,flash --batch 4 --seq 4096 --heads 16 \
    --head-dim 128 --dtype fp16 --causal false,true --no-progress --json "$out/bench.json" > "$out/bench.log" 2>&1
  echo "rc=$?" >> "$out/bench.log"
fi
tail -n 12 "$out"/*.log "$out"/*.jsonl 2>/dev/null
