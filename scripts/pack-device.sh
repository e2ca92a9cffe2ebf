#!/bin/sh
# Prepares .device/ for the GPU machine (the team's pack.sh beside the checkout), then slims the carried
# node_modules archive to what runs there: the linter, the type-checker and the browser driver are
# only needed here, and with them the carried tree would pass the 64 MiB limit (62 MiB vs ~30); of Dawn
# (npm webgpu: 132 MB for five platforms) only linux-x64 travels (21 MB, 4.9 MB compressed).
set -eu
cd "$(git rev-parse --show-toplevel)"
sh ../shared/device/pack.sh >/dev/null
tar -cf - --exclude='node_modules/@biomejs' --exclude='node_modules/@typescript' \
  --exclude='node_modules/typescript' --exclude='node_modules/playwright-core' \
  --exclude='node_modules/webgpu/dist/darwin-*' --exclude='node_modules/webgpu/dist/win32-*' \
  --exclude='node_modules/webgpu/dist/linux-arm64' \
  --exclude='node_modules/.cache' node_modules | xz -T2 -6 > .device/node_modules.tar.xz
# Results made on the GPU machine name this commit (ATTNLAB_COMMIT, set by scripts/gpu-lib.sh): its copy of the tree
# has no .git of ours (at times a stale one).
{ git rev-parse HEAD; git diff --quiet HEAD || echo '(with uncommitted changes)'; } | paste -sd' ' > .device/commit
du -sh .device
