#!/usr/bin/env bash
# Keeps a GPU run of the lab and of the notebook in the repository, as the data a machine without a
# GPU shows beside its own numbers:
#   scripts/record-gpu-lab.sh LAB_JSON [EXECUTED_NOTEBOOK]
# LAB_JSON (from `attnlab lab --out DIR` on a GPU: DIR/lab.json) becomes
# src/report/recorded/lab-<gpu>-<date>-<commit>.json, checked by the results validator and formatted
# as the linter wants; EXECUTED_NOTEBOOK (from scripts/run-notebook.ts on a GPU) becomes
# notebooks/attention-codelab.gpu.ipynb. Then run test/unit/report/notebook.test.ts, which checks both.
set -euo pipefail
cd "$(dirname "$0")/.."
lab=${1:?usage: scripts/record-gpu-lab.sh LAB_JSON [EXECUTED_NOTEBOOK]}
name=$(node --import tsx -e "
import('./src/results/files.ts').then(({ loadResults }) => {
  const r = loadResults(process.argv[1]);
  if (r.kind !== 'lab' || !r.machine.gpu) throw new Error(process.argv[1] + ' is not a lab run on a GPU');
  const gpu = (/\b([A-Z]\d{2,4}[A-Za-z]*)\b/.exec(r.machine.gpu.name) ?? [r.machine.gpu.name])[0];
  const slug = gpu.toLowerCase().replace(/[^a-z0-9]+/g, '-');
  console.log('lab-' + slug + '-' + r.createdAt.slice(0, 10) + '-' + r.attnlab.commit.replace(/-dirty\$/, '') + '.json');
});" "$lab")
mkdir -p src/report/recorded
# Given the file already kept (to add only a notebook), there is nothing to copy.
[ "$(realpath "$lab")" = "$(realpath -m "src/report/recorded/$name")" ] || cp "$lab" "src/report/recorded/$name"
npx biome format --write "src/report/recorded/$name" >/dev/null
echo "recorded lab run: src/report/recorded/$name"
if [ -n "${2:-}" ]; then
  cp "$2" notebooks/attention-codelab.gpu.ipynb
  echo "executed notebook: notebooks/attention-codelab.gpu.ipynb"
fi
