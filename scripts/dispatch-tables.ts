/**
 * The generator of the recorded dispatch tables, from results files:
 * - forward (src/backends/dispatch-table.ts): an `attnlab bench` results file becomes, per
 *   (dtype, H, causal) of its attnlab forward rows at one shape, each backend's median TFLOP/s rounded
 *   to 0.1; `tablesFromResults` makes one table per multi-head shape of a sweep (a T sweep gives one per
 *   length), with the file's GPU as a device class and its provenance (GPU, commit, suite, date);
 * - decode (src/backends/decode-dispatch-table.ts): `recordedGbs` reads each case's number from the
 *   file its timing cites, `deviceOfResults` the device class of those files.
 * test/unit/backends/dispatch-table.test.ts checks the tables in src/ against the files they cite with these
 * functions. Results files live in benchmarks/results/<gpu>/<suite>/.
 *
 * Run: node --import tsx scripts/dispatch-tables.ts <results.json>...   (prints the forward tables)
 *      node --import tsx scripts/dispatch-tables.ts --decode            (prints each decode case's numbers)
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import {
  DECODE_DISPATCH_TABLES,
  type DecodeTiming,
  type MeasuredDecodeCase,
} from '../src/backends/decode-dispatch-table.js';
import type { DeviceClass } from '../src/backends/device-dispatch-table.js';
import type { DispatchTable, MeasuredCase, Provenance } from '../src/backends/dispatch-table.js';
import { IMPLEMENTATIONS, type Implementation } from '../src/backends/problem.js';
import { loadResults } from '../src/results/files.js';
import type { ResultsFile } from '../src/results/schema.js';

/** The GPU of a results file as dispatch keys it; SM count and bandwidth where the file records them. */
export function deviceOfResults(machine: ResultsFile['machine']): DeviceClass {
  const gpu = (machine.gpu ?? {}) as Record<string, unknown>;
  const number = (value: unknown) => (typeof value === 'number' ? value : null);
  const cudnn = machine.libraries?.cudnn;
  return {
    gpu: typeof gpu.name === 'string' ? gpu.name : 'unknown',
    computeCapability: typeof gpu.computeCapability === 'string' ? gpu.computeCapability : 'unknown',
    multiprocessors: number(gpu.multiprocessors),
    memoryBandwidthGBs: number(gpu.memoryBandwidthGBs),
    cudnn: typeof cudnn === 'string' ? (cudnn.split(' ')[0] ?? null) : null,
  };
}

/** The device class of any JSON file with a results-style `machine` (decode-bench files included). */
export function deviceOfFile(path: string): DeviceClass {
  return deviceOfResults(JSON.parse(readFileSync(path, 'utf8')).machine);
}

/**
 * Where a table comes from: the path, and what the file says of its run; the suite is the folder of
 * benchmarks/results/<gpu>/<suite>/, or the file's `kind` for a file recorded before that layout.
 */
export function provenanceOf(file: ResultsFile, source: string): Provenance {
  const suite = /benchmarks\/results\/[^/]+\/([^/]+)\//.exec(source)?.[1] ?? file.kind;
  return {
    source,
    gpu: file.machine.gpu?.name ?? 'unknown',
    commit: file.attnlab?.commit ?? null,
    suite,
    date: file.createdAt ? file.createdAt.slice(0, 10) : null,
  };
}

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
    provenance: provenanceOf(file, source),
    device: deviceOfResults(file.machine),
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

/** The GB/s `timing` points at for case `c` of backend `impl`; throws when the file has no such row. */
export function recordedGbs(c: MeasuredDecodeCase, impl: string, timing: DecodeTiming): number {
  const text = readFileSync(timing.source, 'utf8');
  const layout = c.layout;
  if (timing.source.endsWith('.json')) {
    const rows = JSON.parse(text).rows as Array<Record<string, unknown>>;
    const row = rows.find(
      (r) => r.label === `attnlab ${impl} ${layout}` && r.B === c.B && r.S === c.S && r.K === c.K,
    );
    if (!row || typeof row.bandwidthGBs !== 'number')
      throw new Error(`${timing.source}: no ${impl} ${layout} row at B=${c.B} S=${c.S} K=${c.K}`);
    return Math.round(row.bandwidthGBs);
  }
  // B S K layout kernel rt splits ms GB/s [*]
  for (const line of text.split('\n')) {
    const f = line.trim().split(/\s+/);
    if (f.length < 10 || f[9] !== '*') continue;
    if (
      Number(f[0]) === c.B &&
      Number(f[1]) === c.S &&
      Number(f[2]) === c.K &&
      f[3] === layout &&
      f[4] === timing.kernel
    )
      return Math.round(Number(f[8]));
  }
  throw new Error(`${timing.source}: no ${timing.kernel} ${layout} line at B=${c.B} S=${c.S} K=${c.K}`);
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const paths = process.argv.slice(2);
  if (paths[0] === '--decode') {
    for (const table of DECODE_DISPATCH_TABLES)
      for (const c of table.cases) {
        const numbers = Object.entries(c.timing).map(
          ([impl, timing]) => `${impl} ${recordedGbs(c, impl, timing!)} (${timing!.kind})`,
        );
        console.log(`${table.device.gpu} B=${c.B} S=${c.S} K=${c.K} ${c.layout}: ${numbers.join(', ')}`);
      }
  } else if (paths.length === 0) {
    console.error('usage: node --import tsx scripts/dispatch-tables.ts <results.json>... | --decode');
    process.exitCode = 2;
  } else {
    const tables = paths.flatMap((path) => tablesFromResults(loadResults(path), path));
    console.log(JSON.stringify(tables, null, 2));
  }
}
