#!/bin/sh
# Prepares .device/ for a GPU machine without Node.js (scripts/device/pack.sh: Node.js, npm, node_modules and
# scripts/device/on-gpu.sh), then slims the node_modules archive to what runs there: the linter, the
# type-checker, the browser driver and the Jupyter kernel (tslab with its rollup and zeromq; the GPU
# machine runs the notebook with scripts/run-notebook.ts) run only on the development machine, and without them the carried
# tree is ~30 MiB instead of 62 (a 64 MiB transfer limit); of Dawn (npm webgpu: 132 MB for five
# platforms) only linux-x64 travels (21 MB, 4.9 MB compressed). Usage, from the project root after `npm ci`:
#   sh scripts/pack-device.sh     then on the GPU machine:  bash .device/on-gpu.sh <command...>
set -eu
cd "$(git rev-parse --show-toplevel)"
sh scripts/device/pack.sh >/dev/null
tar -cf - --exclude='node_modules/@biomejs' --exclude='node_modules/@typescript' \
  --exclude='node_modules/typescript' --exclude='node_modules/playwright-core' \
  --exclude='node_modules/tslab' --exclude='node_modules/@tslab' --exclude='node_modules/zeromq' \
  --exclude='node_modules/rollup' --exclude='node_modules/@rollup' \
  --exclude='node_modules/webgpu/dist/darwin-*' --exclude='node_modules/webgpu/dist/win32-*' \
  --exclude='node_modules/webgpu/dist/linux-arm64' \
  --exclude='node_modules/.cache' node_modules | xz -T2 -6 > .device/node_modules.tar.xz
# Results made on the GPU machine name this commit (ATTNLAB_COMMIT, set by scripts/gpu-lib.sh): its copy of the tree
# has no .git of ours (at times a stale one).
{ git rev-parse HEAD; git diff --quiet HEAD || echo '(with uncommitted changes)'; } | paste -sd' ' > .device/commit
du -sh .device
