#!/bin/bash
# Installs the WebGPU attention peers that benchmarks/harnesses/webgpu-peer-ort.ts and
# webgpu-peer-jaxjs.ts time beside attnlab in Node, into <dir>/node_modules (default .peers, which git
# ignores), outside attnlab's own dependencies: onnxruntime-node 1.30.0 (its WebGPU execution provider is
# built into the Linux x64 libonnxruntime.so) and @jax-js/jax 0.1.25. Only onnxruntime-node's Linux x64
# binaries are kept (47 MB of its 288), so the folder fits beside the tree on a GPU machine without a
# registry (carry it; the harnesses take --modules <dir>/node_modules). jax-js's iterator helpers on Node
# < 22 come from a small polyfill in its harness rather than core-js (16 MB).
# Usage, from the repo root on a machine with the npm registry: bash scripts/webgpu-peers.sh [dir]
set -eu
dir=${1:-.peers}
mkdir -p "$dir"
npm install --prefix "$dir" --no-save --no-audit --no-fund --ignore-scripts \
  onnxruntime-node@1.30.0 @jax-js/jax@0.1.25
bin="$dir/node_modules/onnxruntime-node/bin/napi-v6"
rm -rf "$bin/darwin" "$bin/win32" "$bin/linux/arm64"
du -sh "$dir/node_modules"
