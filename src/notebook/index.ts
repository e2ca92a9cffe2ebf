/**
 * `attnlab/notebook`: what the codelab notebook (notebooks/attention-codelab.ipynb) displays with —
 * tables as HTML and charts as PNG, drawn by the HTML report's own renderers (report/html.ts's
 * table, report/charts.ts's chart specs, report/chart-config.ts's chart.js configuration), the
 * codelab's sizes for this machine, timed sweeps, and the recorded GPU run shown beside a CPU's.
 *
 * A notebook kernel's display object (tslab's `display`) is passed in: nothing here depends on a
 * kernel, so the same calls run in JupyterLab, under nbconvert and in scripts/run-notebook.ts.
 *
 * @example
 * import * as tslab from 'tslab';
 * import * as nb from 'attnlab/notebook';
 * const rows = await nb.timeSweeps([{ name: 'seq', spec: nb.codelabSpec('seq') }]);
 * await nb.show(tslab.display, rows);
 */
import { cudaAvailable } from '../backends/cuda/runtime/context.js';
import { memoryShortfall } from '../bench/fit.js';
import { type CodelabSizes, codelabSizes, codelabSweeps } from '../bench/presets.js';
import { runSweeps, type SweepGroup } from '../bench/run-bench.js';
import type { SweepSpec } from '../bench/sweep.js';
import { formatBytes } from '../errors.js';
import { type ChartSpec, chartsFor, type NamedRows } from '../report/charts.js';
import { escapeHtml, simpleTable } from '../report/html.js';
import { type RecordedRun, recordedGpuLab } from '../report/recorded.js';
import { CPU_FUSED_NOTE, chartShows, sweepTitle } from '../report/sweep-text.js';
import { formatNumber } from '../report/terminal.js';
import type { ResultRow } from '../results/schema.js';
import { shapeLabel } from '../results/shape-label.js';
import { chartPng, pngChartsUnavailable } from './png.js';

export type { SweepGroup } from '../bench/run-bench.js';
export type { SweepSpec } from '../bench/sweep.js';
export type { ChartSpec } from '../report/charts.js';
export type { RecordedRun } from '../report/recorded.js';
export { CPU_FUSED_NOTE } from '../report/sweep-text.js';
export type { ResultRow } from '../results/schema.js';
export { chartPng, type PngOptions, pngChartsUnavailable } from './png.js';

/** What the notebook's cells need of a kernel's display object (tslab's `display` has both). */
export interface Display {
  html(html: string): void;
  png(bytes: Uint8Array): void;
}

/** The machine the notebook runs on and the codelab's sizes there. */
export interface NotebookDevice {
  readonly device: 'cuda' | 'cpu';
  readonly sizes: CodelabSizes;
  /** One sentence: the GPU, or why there is none and what runs instead. */
  readonly summary: string;
}

/** The device the cells run on: the GPU when CUDA loads, else the CPU backends at small sizes. */
export function notebookDevice(): NotebookDevice {
  const cuda = cudaAvailable();
  const device = cuda.ok ? 'cuda' : 'cpu';
  const sizes = codelabSizes(device, false);
  const summary = cuda.ok
    ? 'A CUDA GPU is available: the cells run the naive, flash and cuDNN CUDA backends at the codelab sizes.'
    : `No CUDA GPU here (${cuda.reason.split(';')[0]}): the cells run attnlab's CPU backends — "reference" ` +
      `(float64) as the attention from scratch, "flash" (tiled online softmax) as the fused one — at small ` +
      `sizes (B=${sizes.B}, T=${sizes.T}, N=${sizes.N}, H=${sizes.H}), and show a recorded GPU run beside them.`;
  return { device, sizes, summary };
}

/** The codelab's sweep of that name (`default`, `seq`, `batch`) at this machine's sizes, as data to edit. */
export function codelabSpec(name: 'default' | 'seq' | 'batch'): SweepSpec {
  const { device } = notebookDevice();
  const group = codelabSweeps(device, false).filter((g) => g.name === name);
  if (group.length === 0) throw new Error(`no codelab sweep named ${name}`);
  // The presets split a sweep by dtype into groups of one name; the notebook times them as one spec.
  const merge = <T>(pick: (s: SweepSpec) => readonly T[]) => [...new Set(group.flatMap((g) => pick(g.spec)))];
  const first = group[0].spec;
  return {
    ...first,
    dtype: merge((s) => s.dtype),
    impl: merge((s) => s.impl),
  };
}

/** Options of timeSweeps: the timed-call budget per case (ms) and the passes' repeats. */
export interface TimeOptions {
  readonly budgetMs?: number;
}

/**
 * Times every case of the groups as `attnlab lab` does (3 warm-up calls, at most 50 timed, within
 * the budget; the error against the float64 reference checked) and returns the rows. Cases that
 * would not fit in memory come back as rows saying so; cuDNN on a machine without it, as
 * `unsupported` rows with the reason.
 */
export async function timeSweeps(
  groups: readonly SweepGroup[],
  options: TimeOptions = {},
): Promise<ResultRow[]> {
  const { device } = notebookDevice();
  const run = await runSweeps(groups, {
    measure: {
      sweep: groups[0]?.name ?? 'notebook',
      warmup: 3,
      repeats: 50,
      minRepeats: device === 'cuda' ? 10 : 3,
      budgetMs: options.budgetMs ?? 100,
      checkError: true,
    },
    skip: memoryShortfall,
  });
  return run.rows;
}

/** A table as HTML, with its title above and an optional note below. */
export function htmlTable(
  title: string,
  headers: readonly string[],
  rows: readonly string[][],
  note?: string,
): string {
  const numeric = headers.map(
    (_, i) => rows.length > 0 && rows.every((r) => /^[-+]?[\d.]+(e[-+]?\d+)?(×)?$/i.test(r[i] ?? '')),
  );
  return (
    `<div class="attnlab-table"><strong>${escapeHtml(title)}</strong>` +
    simpleTable(headers, rows, numeric) +
    (note ? `<p><em>${escapeHtml(note)}</em></p>` : '') +
    '</div>'
  );
}

/** Timed rows as an HTML table: series, shape, median ms, TFLOP/s (GB/s for decode), error, status. */
export function rowsHtml(rows: readonly ResultRow[], title = 'Timed rows'): string {
  const rate = rows.some((r) => r.bandwidthGBs !== undefined);
  const body = rows.map((r) => [
    r.label,
    shapeLabel(r),
    r.timing ? formatNumber(r.timing.ms.median) : '—',
    rate
      ? r.bandwidthGBs !== undefined
        ? formatNumber(r.bandwidthGBs)
        : '—'
      : r.tflops
        ? formatNumber(r.tflops)
        : '—',
    r.maxError !== undefined && r.maxError !== null ? r.maxError.toExponential(1) : '—',
    r.status === 'ok' ? 'ok' : `${r.status}: ${r.reason ?? ''}`,
  ]);
  return htmlTable(
    title,
    ['series', 'B×T×N×H', 'ms (median)', rate ? 'GB/s' : 'TFLOP/s', 'max error', 'status'],
    body,
  );
}

/** Charts of the rows (one per sweep and measure), with the recorded GPU run's rows of the same sweeps beside. */
export function chartSpecs(rows: readonly ResultRow[], recorded: RecordedRun | null = null): ChartSpec[] {
  const { device } = notebookDevice();
  const files: NamedRows[] = [
    { name: device === 'cuda' ? 'this GPU' : 'this CPU', results: { rows: [...rows] } },
  ];
  const sweeps = new Set(rows.map((r) => r.sweep));
  const theirs = recorded?.results.rows.filter((r) => sweeps.has(r.sweep)) ?? [];
  if (recorded && theirs.length > 0)
    files.push({ name: `recorded ${recorded.label}`, results: { rows: theirs } });
  return chartsFor(files);
}

/**
 * Shows timed rows the way the lab's report does: their table, then (on a machine without a GPU) the
 * recorded GPU run's rows of the same sweeps, then each chart as a PNG with what it shows under it.
 * `charts: 'time'` draws only the time charts (the default); 'all' adds TFLOP/s or GB/s.
 */
export async function show(
  display: Display,
  rows: readonly ResultRow[],
  options: { title?: string; charts?: 'time' | 'all'; recorded?: boolean } = {},
): Promise<void> {
  const { device } = notebookDevice();
  const sweeps = [...new Set(rows.map((r) => r.sweep))];
  display.html(rowsHtml(rows, options.title ?? sweeps.map(sweepTitle).join(', ')));
  const recorded = (options.recorded ?? device === 'cpu') ? recordedGpuLab() : null;
  if (options.recorded ?? device === 'cpu') {
    const theirs = recorded?.results.rows.filter((r) => sweeps.includes(r.sweep)) ?? [];
    if (recorded && theirs.length > 0)
      display.html(rowsHtml(theirs, `The same sweep recorded on ${recorded.label}`));
    else display.html(`<p><em>${escapeHtml(noRecordedRun(recorded))}</em></p>`);
  }
  const unavailable = pngChartsUnavailable();
  const explained = new Set<string>();
  for (const spec of chartSpecs(rows, recorded)) {
    if ((options.charts ?? 'time') === 'time' && !spec.id.endsWith('-ms')) continue;
    if (unavailable) {
      display.html(`<p><em>${escapeHtml(`${spec.title}: not drawn, ${unavailable}.`)}</em></p>`);
      continue;
    }
    display.png(await chartPng(spec));
    const shows = chartShows(spec);
    if (shows && !explained.has(shows)) display.html(`<p><em>What this shows:</em> ${escapeHtml(shows)}</p>`);
    explained.add(shows);
  }
  const impls = new Set(rows.map((r) => r.impl));
  if (device === 'cpu' && impls.has('reference') && impls.has('flash')) {
    const beside = recorded ? ` The recorded run on ${recorded.label} shows what that buys.` : '';
    display.html(`<p><em>Why fused is not faster here:</em> ${escapeHtml(CPU_FUSED_NOTE + beside)}</p>`);
  }
}

function noRecordedRun(recorded: RecordedRun | null): string {
  return recorded
    ? `The recorded GPU run (${recorded.label}) has no rows of this sweep.`
    : 'This copy of attnlab ships no recorded GPU run of the lab.';
}

/** The recorded GPU lab run shipped with the package (its GPU and day in `label`), or null. */
export function recordedRun(): RecordedRun | null {
  return recordedGpuLab();
}

/**
 * The recorded GPU run's tables whose title contains `match` (case counts: 'Fused'), and its timed rows of
 * the sweeps whose id starts with one of `sweeps` (e.g. ['fp8'], ['fwd-bwd']), as HTML, titled with
 * the GPU and day; a sentence when the package ships no recorded run or it has none of them.
 */
export function recordedTables(match: string, sweeps: readonly string[] = []): string {
  const recorded = recordedGpuLab();
  if (!recorded) return `<p><em>${escapeHtml(noRecordedRun(null))}</em></p>`;
  const tables = recorded.results.tables
    .filter((t) => t.title.includes(match))
    .map((t) => htmlTable(`Recorded on ${recorded.label}: ${t.title}`, t.headers, t.rows, t.note));
  const rows = recorded.results.rows.filter((r) => sweeps.some((s) => r.sweep.startsWith(s)));
  if (rows.length > 0)
    tables.push(rowsHtml(rows, `Recorded on ${recorded.label}: ${sweepTitle(rows[0].sweep)}`));
  if (tables.length === 0) {
    return `<p><em>The recorded GPU run (${escapeHtml(recorded.label)}) has nothing on ${escapeHtml(match)}.</em></p>`;
  }
  return tables.join('');
}

/** KV-cache bytes per token and layer: 2 (K and V) × K heads × H × bytes per value. */
export function kvCacheBytesPerToken(kvHeads: number, headDim: number, bytesPerValue: number): number {
  return 2 * kvHeads * headDim * bytesPerValue;
}

/** Bytes as text (1.5 MiB), for the cells' own tables. */
export function bytesText(bytes: number): string {
  return formatBytes(bytes);
}
