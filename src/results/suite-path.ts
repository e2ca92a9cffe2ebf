/**
 * Where a suite's results are filed: <root>/<gpu>/<suite>/<date>-<commit>.json, beside its HTML
 * report. The GPU is a short slug (`h200`, `h100-sxm`), so one GPU's runs of one suite sit together
 * and a file's name says what it measured, on which commit and when.
 */

import { existsSync } from 'node:fs';
import { join } from 'node:path';

/** The folder suites write under when no --out is given, relative to the working directory. */
export const SUITE_RESULTS_ROOT = join('benchmarks', 'results');

/**
 * A GPU's name as a folder name: lower case, the vendor and brand words and the memory size dropped,
 * the form factor kept. `NVIDIA H200` → `h200`; `NVIDIA H100 80GB HBM3` (the SXM board, which names
 * only its memory) → `h100-sxm`; `NVIDIA H100 PCIe` → `h100-pcie`; `NVIDIA H100 NVL` → `h100-nvl`;
 * `NVIDIA A100-SXM4-80GB` → `a100-sxm4`; `NVIDIA GeForce RTX 4090` → `rtx-4090`. No GPU: `cpu`.
 */
export function gpuSlug(name: string | undefined): string {
  if (name === undefined || name.trim() === '') return 'cpu';
  const words = name
    .toLowerCase()
    .split(/[^a-z0-9]+/)
    .filter((w) => w !== '');
  const memory = (w: string) => /^\d+gb$/.test(w) || /^hbm\d*e?$/.test(w);
  const kept = words.filter((w) => !['nvidia', 'geforce', 'tesla'].includes(w) && !memory(w));
  const formFactor = kept.some((w) => /^(sxm\d*|pcie|nvl)$/.test(w));
  // The H100 and H800 SXM boards name their memory (80GB HBM3) where the others name their form factor.
  if (!formFactor && kept.length === 1 && /^h[18]00$/.test(kept[0]) && words.some((w) => /^hbm/.test(w)))
    kept.push('sxm');
  return kept.length > 0 ? kept.join('-') : 'gpu';
}

/** The date part of a results file name: the UTC day, YYYY-MM-DD. */
export function utcDay(date: Date): string {
  return date.toISOString().slice(0, 10);
}

export interface SuiteFiles {
  readonly json: string;
  readonly html: string;
}

/**
 * The results and report paths of one suite run. A second run of the same commit on the same day
 * takes the next free number (`…-<commit>-2.json`): a recorded run is never overwritten.
 */
export function suiteResultsFiles(
  root: string,
  gpu: string,
  suite: string,
  date: Date,
  commit: string,
  exists: (path: string) => boolean = existsSync,
): SuiteFiles {
  const folder = join(root, gpu, suite);
  const stem = `${utcDay(date)}-${commit}`;
  for (let n = 1; ; n++) {
    const name = n === 1 ? stem : `${stem}-${n}`;
    const files = { json: join(folder, `${name}.json`), html: join(folder, `${name}.html`) };
    if (!exists(files.json) && !exists(files.html)) return files;
  }
}
