/**
 * Turns an `attnlab bench` results file into the measured dispatch table's cases
 * (src/backends/dispatch-table.ts): per (dtype, H, causal) of the file's attnlab forward rows at one
 * shape, each backend's median TFLOP/s rounded to 0.1; `tablesFromResults` makes one table per
 * multi-head shape of a sweep (a T sweep gives one per length). test/cpu/dispatch-table.test.ts
 * checks the tables in src/ against the file they cite with the same functions.
 *
 * Run: node --import tsx bench/dispatch/make-table.ts bench/results/<run>/<file>.json
 */
import { fileURLToPath } from 'node:url';
import type { DispatchTable, MeasuredCase } from '../../src/backends/dispatch-table.js';
import { IMPLEMENTATIONS, type Implementation } from '../../src/backends/problem.js';
import { loadResults } from '../../src/results/files.js';
import type { ResultsFile } from '../../src/results/schema.js';

/** The table a results file supports; throws when its attnlab rows span more than one shape. */
export function tableFromResults(file: ResultsFile, source: string): DispatchTable {
  const rows = file.rows.filter(
    (r) =>
      r.source === 'attnlab' &&
      (r.pass ?? 'forward') === 'forward' &&
      r.status === 'ok' &&
      r.tflops !== undefined &&
      IMPLEMENTATIONS.includes(r.impl as Implementation) &&
      (r.dtype === 'bfloat16' || r.dtype === 'float16'),
  );
  if (rows.length === 0) throw new Error(`${source}: no attnlab forward rows with a timing`);
  const shapes = new Set(rows.map((r) => `${r.B}x${r.T}x${r.S}x${r.N}x${r.K}`));
  if (shapes.size !== 1)
    throw new Error(`${source}: attnlab rows at ${[...shapes].join(', ')}; one shape expected`);
  const flashKinds = new Set(
    rows.filter((r) => r.impl === 'flash').map((r) => (r.variant?.endsWith('.wgmma') ? 'wgmma' : 'mma')),
  );
  if (flashKinds.size > 1) throw new Error(`${source}: flash rows of both kernels`);
  const cases = new Map<
    string,
    {
      dtype: MeasuredCase['dtype'];
      H: number;
      causal: boolean;
      tflops: Partial<Record<Implementation, number>>;
    }
  >();
  for (const r of rows) {
    const key = `${r.dtype}/${r.H}/${r.causal}`;
    const entry = cases.get(key) ?? {
      dtype: r.dtype as MeasuredCase['dtype'],
      H: r.H,
      causal: r.causal,
      tflops: {},
    };
    entry.tflops[r.impl as Implementation] = Math.round(r.tflops! * 10) / 10;
    cases.set(key, entry);
  }
  const [first] = rows;
  return {
    source,
    gpu: file.machine.gpu?.name ?? 'unknown',
    flashKernel: flashKinds.has('mma') ? 'mma' : 'wgmma',
    shape: { B: first.B, T: first.T, S: first.S, N: first.N },
    cases: [...cases.values()],
  };
}

/**
 * One table per shape of the file's attnlab forward rows with K = N (GQA rows measure the same
 * kernels at the same length, so they add no choice), shortest sequences first.
 */
export function tablesFromResults(file: ResultsFile, source: string): DispatchTable[] {
  const shapeOf = (r: ResultsFile['rows'][number]) => `${r.B}x${r.T}x${r.S}x${r.N}x${r.K}`;
  const shapes = new Map<string, number>();
  for (const r of file.rows)
    if (r.source === 'attnlab' && r.K === r.N) shapes.set(shapeOf(r), Math.sqrt(r.T * r.S));
  return [...shapes]
    .sort((a, b) => a[1] - b[1])
    .flatMap(([shape]) => {
      const rows = file.rows.filter((r) => r.source === 'attnlab' && shapeOf(r) === shape);
      const timed = rows.some(
        (r) =>
          r.status === 'ok' && r.tflops !== undefined && IMPLEMENTATIONS.includes(r.impl as Implementation),
      );
      return timed ? [tableFromResults({ ...file, rows }, source)] : [];
    });
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const path = process.argv[2];
  if (!path) {
    console.error('usage: node --import tsx bench/dispatch/make-table.ts <results.json>');
    process.exit(2);
  }
  console.log(JSON.stringify(tablesFromResults(loadResults(path), path), null, 2));
}
