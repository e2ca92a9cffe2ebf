#!/bin/sh
# Prepares .device/ for the GPU machine (the team's pack.sh beside the checkout), then slims the carried
# node_modules archive to what runs there: the linter, the type-checker, the browser driver and the
# Jupyter kernel (tslab and its rollup and zeromq; the GPU machine runs the notebook with
# scripts/run-notebook.ts) are only needed here, and with them the carried tree would pass the
# 64 MiB limit (62 MiB vs ~30 without the kernel).
set -eu
cd "$(git rev-parse --show-toplevel)"
sh ../shared/device/pack.sh >/dev/null
tar -cf - --exclude='node_modules/@biomejs' --exclude='node_modules/@typescript' \
  --exclude='node_modules/typescript' --exclude='node_modules/playwright-core' \
  --exclude='node_modules/tslab' --exclude='node_modules/@tslab' --exclude='node_modules/zeromq' \
  --exclude='node_modules/rollup' --exclude='node_modules/@rollup' \
  --exclude='node_modules/.cache' node_modules | xz -T2 -6 > .device/node_modules.tar.xz
# Results made on the GPU machine name this commit (ATTNLAB_COMMIT, set by scripts/gpu-lib.sh): its copy of the tree
# has no .git of ours (at times a stale one).
{ git rev-parse HEAD; git diff --quiet HEAD || echo '(with uncommitted changes)'; } | paste -sd' ' > .device/commit
du -sh .device
