#!/bin/sh
# Prepares .device/ for the GPU machine (the team's pack.sh beside the checkout), then slims the carried
# node_modules archive to what runs there: the linter, the type-checker and the browser driver are
# only needed here, and with them the carried tree would pass the 64 MiB limit (62 MiB vs ~30).
set -eu
cd "$(git rev-parse --show-toplevel)"
sh ../shared/device/pack.sh >/dev/null
tar -cf - --exclude='node_modules/@biomejs' --exclude='node_modules/@typescript' \
  --exclude='node_modules/typescript' --exclude='node_modules/playwright-core' \
  --exclude='node_modules/.cache' node_modules | xz -T2 -6 > .device/node_modules.tar.xz
# The GPU machine gets the tree without .git: results made there name this commit (see ATTNLAB_COMMIT).
{ git rev-parse HEAD; git diff --quiet HEAD || echo '(with uncommitted changes)'; } | paste -sd' ' > .device/commit
du -sh .device
