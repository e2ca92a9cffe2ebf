#!/bin/bash
# The webgpu backend on the GPU machine's NVIDIA Vulkan driver: the correctness suites, then the
# timings of scripts/webgpu-timing.ts. Logs go to $1 (default ./webgpu-gpu-out); $2 picks the
# stage: device (info and device tests, ≤ 50 s), suite, nan and suite-extra (≤ 55 s each), backward and
# backward-extra (the backward suite, ≤ 55 s each), timing (≤ 55 s), timing-forward (the forward alone,
# with the Dawn toggles of $3 if given, ≤ 40 s), ceilings (the bare-kernel ceilings of
# benchmarks/harnesses/webgpu-ceilings.ts, ≤ 55 s), sgmat-checks (the subgroup-matrix operations one by
# one, benchmarks/harnesses/webgpu-sgmat-checks.ts, ≤ 55 s), trace (the sgmat kernel traced,
# benchmarks/harnesses/webgpu-sgmat-trace.ts, ≤ 85 s), isolate and isolate-extra (the kernel's K load
# taken apart, benchmarks/harnesses/webgpu-sgmat-isolate.ts, a process a case, ≤ 110 s; the alignedTiles layouts traced,
# ≤ 50 s), peers (onnxruntime-node's WebGPU provider and
# jax-js beside attnlab, from a carried .peers/, ≤ 85 s), bench (attnlab bench --impl webgpu,flash on the
# forward shape, ≤ 55 s), or all (default: all but timing-forward, peers, bench, ceilings, trace, isolate and isolate-extra).
# ATTNLAB_WEBGPU_EXPERIMENTAL=1 in the environment opens the device with Dawn's experimental
# features and f16 on NVIDIA (the subgroup-matrix kernel).
# Usage, from the repo root: bash .device/on-gpu.sh bash scripts/webgpu-gpu.sh "$OUT/webgpu" suite
#
# Dawn needs a Vulkan loader (libvulkan.so.1), and NVIDIA's ICD (libGLX_nvidia.so.0) needs glvnd's
# libGLdispatch: without it the loader finds the ICD but "Could not get 'vkCreateInstance' via
# 'vk_icdGetInstanceProcAddr'" and no adapter opens. Every .deb under .gl/ (libvulkan1 libegl1
# libglvnd0 libopengl0 libgl1 libglx0 libgles2, downloaded on the CPU machine and carried) is
# unpacked at every run, as the device notes say, and the NVIDIA ICD and EGL vendor files are named.
set -u
out=${1:-webgpu-gpu-out}
stage=${2:-all}
mkdir -p "$out"
# The clocks and P-state every 200 ms beside the timed stages (a Vulkan context may not raise them
# as a CUDA one does).
sample_clocks() {
  nvidia-smi --query-gpu=timestamp,pstate,clocks.sm,clocks.mem,utilization.gpu,power.draw \
    --format=csv -lms 200 > "$out/clocks-$1.csv" 2>&1 &
  clocks_pid=$!
}
for f in .gl/*.deb; do [ -f "$f" ] && dpkg -x "$f" /; done
ldconfig
nvidia=/usr/local/nvidia/share
if [ -z "${VK_DRIVER_FILES:-}" ] && [ -f "$nvidia/vulkan/icd.d/nvidia_icd.json" ]; then
  export VK_DRIVER_FILES=$nvidia/vulkan/icd.d/nvidia_icd.json
fi
if [ -z "${__EGL_VENDOR_LIBRARY_FILENAMES:-}" ] && [ -f "$nvidia/glvnd/egl_vendor.d/10_nvidia.json" ]; then
  export __EGL_VENDOR_LIBRARY_FILENAMES=$nvidia/glvnd/egl_vendor.d/10_nvidia.json
fi
{
  ldconfig -p | grep -E 'libvulkan.so.1 |libGLdispatch|libGLX_nvidia' || echo "no libvulkan.so.1: carry .gl/ with libvulkan1's .deb"
  echo "VK_DRIVER_FILES=${VK_DRIVER_FILES:-} __EGL_VENDOR_LIBRARY_FILENAMES=${__EGL_VENDOR_LIBRARY_FILENAMES:-}"
  ls .gl/ "$nvidia/vulkan/icd.d" /usr/share/vulkan/icd.d /etc/vulkan/icd.d 2>&1
} > "$out/loader.txt"
if [ "$stage" = device ] || [ "$stage" = all ]; then
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$out/gpu.txt" 2>&1
  timeout 30 node --import tsx src/cli/bin.ts info > "$out/info.txt" 2>&1
  timeout 40 node --import tsx --test test/unit/backends/webgpu/device.test.ts > "$out/device-tests.log" 2>&1
  echo "rc=$?" >> "$out/device-tests.log"
fi
# The suite in two commands of ≤ 60 s: the full case list, then the forced-split, plain-kernel and row-kernel runs.
if [ "$stage" = suite ] || [ "$stage" = all ]; then
  timeout 55 node --import tsx --test --test-name-pattern='^(?!.*(split|plain|rows|no sgmat|NaN and Inf)).*$' test/unit/backends/webgpu/suite.test.ts \
    > "$out/suite.log" 2>&1
  echo "rc=$?" >> "$out/suite.log"
fi
# The NaN/Inf rule in float32 and float16 (the float16 cases run the subgroup-matrix kernel where it applies).
if [ "$stage" = nan ] || [ "$stage" = all ]; then
  timeout 55 node --import tsx --test --test-name-pattern='NaN and Inf' test/unit/backends/webgpu/suite.test.ts \
    > "$out/nan.log" 2>&1
  echo "rc=$?" >> "$out/nan.log"
fi
if [ "$stage" = suite-extra ] || [ "$stage" = all ]; then
  timeout 55 node --import tsx --test --test-name-pattern='split|plain|rows|no sgmat' test/unit/backends/webgpu/suite.test.ts \
    > "$out/suite-extra.log" 2>&1
  echo "rc=$?" >> "$out/suite-extra.log"
fi
# The backward suite in two commands: the float16 case matrix, then float32, the NaN rule and the rest.
if [ "$stage" = backward ] || [ "$stage" = all ]; then
  timeout 55 node --import tsx --test --test-name-pattern='suite, float16' test/unit/backends/webgpu/backward.test.ts \
    > "$out/backward.log" 2>&1
  echo "rc=$?" >> "$out/backward.log"
fi
if [ "$stage" = backward-extra ] || [ "$stage" = all ]; then
  timeout 55 node --import tsx --test --test-name-pattern='float32|refusals' test/unit/backends/webgpu/backward.test.ts \
    > "$out/backward-extra.log" 2>&1
  echo "rc=$?" >> "$out/backward-extra.log"
fi
if [ "$stage" = timing ] || [ "$stage" = all ]; then
  sample_clocks timing
  timeout 55 node --import tsx scripts/webgpu-timing.ts --reps 3 > "$out/timing.jsonl" 2> "$out/timing.err"
  echo "rc=$?" >> "$out/timing.err"
  kill "$clocks_pid" 2>/dev/null
fi
if [ "$stage" = ceilings ]; then
  sample_clocks ceilings
  timeout 55 node --import tsx benchmarks/harnesses/webgpu-ceilings.ts --reps 5 > "$out/ceilings.jsonl" 2> "$out/ceilings.err"
  echo "rc=$?" >> "$out/ceilings.err"
  kill "$clocks_pid" 2>/dev/null
fi
if [ "$stage" = sgmat-checks ]; then
  timeout 55 node --import tsx benchmarks/harnesses/webgpu-sgmat-checks.ts > "$out/sgmat-checks.jsonl" 2> "$out/sgmat-checks.err"
  echo "rc=$?" >> "$out/sgmat-checks.err"
fi
# The sgmat kernel traced in every layout of the device check (benchmarks/harnesses/webgpu-sgmat-trace.ts,
# ≤ 50 s), then its first layout and the two with every candidate change under Dawn toggles that change the
# generated SPIR-V (the Vulkan memory model, no robustness transform, no workgroup zeroing; ≤ 9 s each), and
# one layout with dump_shaders (whatever Dawn prints of the SPIR-V; ≤ 6 s).
if [ "$stage" = trace ]; then
  timeout 50 node --import tsx benchmarks/harnesses/webgpu-sgmat-trace.ts --raw "$out/trace-raw" > "$out/trace.jsonl" 2> "$out/trace.err"
  echo "rc=$?" >> "$out/trace.err"
  for t in use_vulkan_memory_model disable_robustness use_vulkan_memory_model,disable_robustness disable_workgroup_init; do
    timeout 9 node --import tsx benchmarks/harnesses/webgpu-sgmat-trace.ts --toggles "$t" --layouts 0,6,7 >> "$out/trace-toggles.jsonl" 2>> "$out/trace-toggles.err"
    echo "toggles=$t rc=$?" >> "$out/trace-toggles.err"
  done
  timeout 6 node --import tsx benchmarks/harnesses/webgpu-sgmat-trace.ts --toggles dump_shaders,disable_symbol_renaming --layouts 0 > "$out/dump-shaders.log" 2>&1
  echo "rc=$?" >> "$out/dump-shaders.log"
fi
# The sgmat kernel's K load taken apart (benchmarks/harnesses/webgpu-sgmat-isolate.ts: ordering,
# addresses, placement and live matrices, one case each, then the device check of the alignedTiles
# layouts; ≤ 110 s). Each case runs in a process of its own (≤ 8 s): one case once took the whole process
# down inside Dawn (SIGSEGV), and a case that does so is a finding, recorded as {"case", "exit"}.
# isolate-extra: the placement cases again without Dawn's bounds clamps (≤ 20 s) and the alignedTiles
# layouts traced (webgpu-sgmat-trace.ts --layouts aligned; ≤ 30 s).
if [ "$stage" = isolate ]; then
  harness=benchmarks/harnesses/webgpu-sgmat-isolate.ts
  : > "$out/isolate.jsonl"
  : > "$out/isolate.err"
  header=1
  for name in $(node --import tsx "$harness" --list); do
    timeout 8 node --import tsx "$harness" --cases "$name" > "$out/isolate-case.jsonl" 2>> "$out/isolate.err"
    rc=$?
    if [ $header = 1 ]; then grep '^{' "$out/isolate-case.jsonl" >> "$out/isolate.jsonl"; header=0
    else grep '^{' "$out/isolate-case.jsonl" | grep -v '"adapter"' >> "$out/isolate.jsonl"; fi
    [ $rc -ne 0 ] && echo "{\"case\":\"$name\",\"exit\":$rc}" >> "$out/isolate.jsonl"
  done
  rm -f "$out/isolate-case.jsonl"
  timeout 20 node --import tsx "$harness" --layouts-only 2>> "$out/isolate.err" | grep '^{' | grep -v '"adapter"' >> "$out/isolate.jsonl"
  echo "rc=$?" >> "$out/isolate.err"
fi
if [ "$stage" = isolate-extra ]; then
  timeout 20 node --import tsx benchmarks/harnesses/webgpu-sgmat-isolate.ts --toggles disable_robustness \
    --cases load,load-runtime-stride,lead8-before,lead8-after,kernel-variables,kernel-variables-aligned,scores-kernel-variables,scores-kernel-variables-aligned \
    > "$out/isolate-no-robustness.jsonl" 2> "$out/isolate-extra.err"
  echo "toggles=disable_robustness rc=$?" >> "$out/isolate-extra.err"
  timeout 30 node --import tsx benchmarks/harnesses/webgpu-sgmat-trace.ts --layouts aligned --raw "$out/trace-aligned-raw" \
    > "$out/trace-aligned.jsonl" 2>> "$out/isolate-extra.err"
  echo "trace aligned rc=$?" >> "$out/isolate-extra.err"
fi
# The forward alone (≤ 40 s), with the Dawn toggles given in $3 if any (e.g. use_vulkan_memory_model).
if [ "$stage" = timing-forward ]; then
  sample_clocks timing-forward
  timeout 40 node --import tsx scripts/webgpu-timing.ts --reps 3 --only forward ${3:+--toggles "$3"} > "$out/timing-forward${3:+-$3}.jsonl" 2> "$out/timing-forward.err"
  echo "rc=$?" >> "$out/timing-forward.err"
  kill "$clocks_pid" 2>/dev/null
fi
# The peers in Node (benchmarks/harnesses/webgpu-peer-ort.ts, webgpu-peer-jaxjs.ts) from .peers/node_modules
# (scripts/webgpu-peers.sh; carried), ≤ 45 + 40 s.
if [ "$stage" = peers ]; then
  timeout 45 node --import tsx benchmarks/harnesses/webgpu-peer-ort.ts --modules .peers/node_modules --reps 3 > "$out/peer-ort.jsonl" 2> "$out/peer-ort.err"
  echo "rc=$?" >> "$out/peer-ort.err"
  timeout 40 node --import tsx benchmarks/harnesses/webgpu-peer-jaxjs.ts --modules .peers/node_modules --reps 3 > "$out/peer-jaxjs.jsonl" 2> "$out/peer-jaxjs.err"
  echo "rc=$?" >> "$out/peer-jaxjs.err"
fi
if [ "$stage" = bench ]; then
  timeout 55 node --import tsx src/cli/bin.ts bench --impl webgpu,flash --batch 4 --seq 4096 --heads 16 \
    --head-dim 128 --dtype fp16 --causal false,true --no-progress --json "$out/bench.json" > "$out/bench.log" 2>&1
  echo "rc=$?" >> "$out/bench.log"
fi
tail -n 12 "$out"/*.log "$out"/*.jsonl 2>/dev/null
