#!/bin/sh
# Prepares .device/ (git-ignored) for a GPU machine that has CUDA and Python but no
# Node.js: this machine's Node.js binary and npm, compressed, the project's node_modules as one archive, and
# scripts/device/on-gpu.sh, which unpacks them there and runs a command. Usage, from the project root after
# `npm ci`: sh scripts/device/pack.sh   (scripts/pack-device.sh runs it and slims the archive). Then carry
# .device/ (and any git-ignored build output the run needs) and run: bash .device/on-gpu.sh <command...>
set -eu
root=$(git rev-parse --show-toplevel)
cd "$root"
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p .device
node_bin=$(command -v node)
if [ ! -f .device/node.xz ] || [ "$node_bin" -nt .device/node.xz ]; then
  xz -T2 -6 -c "$node_bin" > .device/node.xz
fi
npm_dir=$(dirname "$(dirname "$(readlink -f "$(command -v npm)")")")
if [ ! -f .device/npm.tar.xz ]; then
  tar -C "$(dirname "$npm_dir")" -cJf .device/npm.tar.xz "$(basename "$npm_dir")"
fi
# node_modules travels compressed (about 6x smaller); rebuilt only when the lock file or the folder changed.
if [ -d node_modules ]; then
  if [ ! -f .device/node_modules.tar.xz ] || [ package-lock.json -nt .device/node_modules.tar.xz ] \
     || [ node_modules -nt .device/node_modules.tar.xz ]; then
    tar -cf - node_modules | xz -T2 -6 > .device/node_modules.tar.xz
  fi
fi
cp "$here/on-gpu.sh" .device/on-gpu.sh
du -sh .device
