#!/bin/bash
# Runs a command on a GPU machine that has CUDA but no Node.js, from the project root, with the Node.js and
# npm that scripts/pack-device.sh put in .device/ on PATH, the project's node_modules unpacked (when it was
# not carried as a folder), and the CUDA libraries (driver, NVRTC, cuBLASLt, cuDNN) findable:
#   bash .device/on-gpu.sh <command...>        e.g.  bash .device/on-gpu.sh npm run test:gpu
# pack-device.sh copies this file to .device/on-gpu.sh. ATTNLAB_DEVICE_NODE_DIR moves the unpacked Node.js
# (default /tmp/node; a file of that folder is reused when present).
set -e
here=$(cd "$(dirname "$0")" && pwd)
node_dir=${ATTNLAB_DEVICE_NODE_DIR:-/tmp/node}
mkdir -p "$node_dir/bin"
if [ ! -x "$node_dir/bin/node" ]; then
  xz -dc "$here/node.xz" > "$node_dir/bin/node" && chmod +x "$node_dir/bin/node"
  tar -C "$node_dir" -xJf "$here/npm.tar.xz"
  printf '#!/bin/sh\nexec "%s/bin/node" "%s/npm/bin/npm-cli.js" "$@"\n' "$node_dir" "$node_dir" > "$node_dir/bin/npm"
  printf '#!/bin/sh\nexec "%s/bin/node" "%s/npm/bin/npx-cli.js" "$@"\n' "$node_dir" "$node_dir" > "$node_dir/bin/npx"
  chmod +x "$node_dir/bin/npm" "$node_dir/bin/npx"
fi
if [ ! -d node_modules ] && [ -f "$here/node_modules.tar.xz" ]; then
  xz -dc "$here/node_modules.tar.xz" | tar -xf -
fi
export PATH=$node_dir/bin:/usr/local/cuda/bin:$PATH
export npm_config_update_notifier=false npm_config_fund=false npm_config_audit=false npm_config_offline=true
# The CUDA toolkit's libraries (NVRTC, cuBLASLt); the system cuDNN is found in its default folder. The system
# folder stays off LD_LIBRARY_PATH: PyTorch would load its older cuDNN from there instead of its own and refuse
# to start.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/targets/x86_64-linux/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
echo "on-gpu: node $(node --version), npm $(npm --version), $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null)" >&2
exec "$@"
