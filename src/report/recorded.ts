/**
 * Recorded GPU runs of the lab, shipped in the package as results files (src/report/recorded/*.json),
 * so that a machine without a GPU shows what each level of the codelab buys on one. Each file is
 * checked by the results validator like any other; a file that fails is left out with the reason
 * (a broken data file costs its own comparison, never the lab).
 */
import { existsSync, readdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { loadResults } from '../results/files.js';
import type { ResultsFile } from '../results/schema.js';

export interface RecordedRun {
  /** The file's name, e.g. 'lab-h100.json'. */
  readonly file: string;
  readonly results: ResultsFile;
  /** 'NVIDIA H100 80GB HBM3, 2026-12-06': the GPU and the day the run was made. */
  readonly label: string;
}

/**
 * The folder of recorded runs: beside this module in the sources (tsx, the tests) and under the
 * shipped sources for the compiled module (dist/src/report/ → src/report/recorded/).
 */
function recordedFolder(): string | null {
  for (const candidate of ['./recorded/', '../../../src/report/recorded/']) {
    const path = fileURLToPath(new URL(candidate, import.meta.url));
    if (existsSync(path)) return path;
  }
  return null;
}

/** A run's GPU and day, as shown beside it. */
export function recordedLabel(results: ResultsFile): string {
  const gpu = results.machine.gpu?.name ?? `CPU (${results.machine.cpu})`;
  return `${gpu}, ${results.createdAt.slice(0, 10)}`;
}

let cache: { runs: RecordedRun[]; problems: string[] } | null = null;

/** Every recorded lab run made on a GPU, newest first, and the files that could not be read, with why. */
export function recordedGpuRuns(folder: string | null = recordedFolder()): {
  runs: RecordedRun[];
  problems: string[];
} {
  if (cache && folder === recordedFolder()) return cache;
  const runs: RecordedRun[] = [];
  const problems: string[] = [];
  const names = folder ? readdirSync(folder).filter((n) => n.endsWith('.json')) : [];
  for (const file of names.sort()) {
    try {
      const results = loadResults(`${folder}/${file}`);
      if (results.kind !== 'lab' || !results.machine.gpu) {
        problems.push(`${file}: not a lab run on a GPU`);
        continue;
      }
      runs.push({ file, results, label: recordedLabel(results) });
    } catch (error) {
      problems.push(`${file}: ${error instanceof Error ? error.message : String(error)}`);
    }
  }
  runs.sort((a, b) => b.results.createdAt.localeCompare(a.results.createdAt));
  const found = { runs, problems };
  if (folder === recordedFolder()) cache = found;
  return found;
}

/** The newest recorded GPU lab run, or null when the package ships none. */
export function recordedGpuLab(): RecordedRun | null {
  return recordedGpuRuns().runs[0] ?? null;
}
