/**
 * Charts derived from results rows, shared by the terminal and the HTML report so both show the same
 * thing. Each sweep group gets one chart per measure: a line chart over the dimension that varies
 * (log axis when its values double), or a bar chart when the group is a single shape.
 */
import type { ResultRow, ResultsFile } from '../results/schema.js';
import { sweepTitle } from './sweep-text.js';

export interface ChartPoint {
  readonly x: number;
  readonly y: number;
}

export interface ChartSeries {
  readonly label: string;
  readonly points: ChartPoint[];
}

export interface ChartSpec {
  readonly id: string;
  /** The sweep id the rows share (`seq`, `fwd-bwd T=64`): the title says it in words (sweep-text.ts). */
  readonly sweep: string;
  /** What the y values are: time per call, throughput or bandwidth. */
  readonly measure?: 'ms' | 'tflops' | 'bandwidth';
  readonly kind: 'line' | 'bar';
  readonly title: string;
  readonly xLabel: string;
  readonly yLabel: string;
  /** Base-2 log x axis: the x values double (or grow by powers of two). */
  readonly logX: boolean;
  /** Log y axis: the values span more than 20×, so a linear axis would flatten the small ones. */
  readonly logY: boolean;
  /** Bar charts: one point per series at x = 0. */
  readonly series: ChartSeries[];
}

/** A results file with the name it is shown under when several are compared. */
export interface NamedResults {
  readonly name: string;
  readonly results: ResultsFile;
}

/** What charts need of a results file: its rows (the lab charts rows before the file exists). */
export interface NamedRows {
  readonly name: string;
  readonly results: Pick<ResultsFile, 'rows'>;
}

type Axis = 'B' | 'T' | 'S' | 'N' | 'K' | 'H';
/** Tie-break order for the x axis: sequence length is what attention sweeps are usually about. */
const AXES: readonly Axis[] = ['T', 'B', 'K', 'N', 'H', 'S'];
const AXIS_NAMES: Record<Axis, string> = {
  B: 'batch B',
  T: 'query length T',
  S: 'key length S',
  N: 'query heads N',
  K: 'KV heads K',
  H: 'head dim H',
};

interface Measure {
  readonly key: string;
  readonly name: string;
  readonly unit: string;
  readonly value: (row: ResultRow) => number | undefined;
}

const MEASURES: readonly Measure[] = [
  { key: 'ms', name: 'Median time per call', unit: 'ms', value: (r) => r.timing?.ms.median },
  { key: 'tflops', name: 'Throughput', unit: 'TFLOP/s', value: (r) => r.tflops },
  { key: 'bandwidth', name: 'Bandwidth', unit: 'GB/s', value: (r) => r.bandwidthGBs },
];

/** Every chart for the given result files, in the order their sweep groups first appear. */
export function chartsFor(files: readonly NamedRows[]): ChartSpec[] {
  const groups = new Map<string, { row: ResultRow; file: string }[]>();
  for (const { name, results } of files) {
    for (const row of results.rows) {
      if (row.status !== 'ok') continue;
      const group = groups.get(row.sweep) ?? [];
      group.push({ row, file: name });
      groups.set(row.sweep, group);
    }
  }
  const prefix = files.length > 1;
  const charts: ChartSpec[] = [];
  for (const [sweep, entries] of groups) {
    const varying = AXES.filter((a) => new Set(entries.map((e) => e.row[a])).size > 1);
    const xAxis = pickXAxis(
      varying,
      entries.map((e) => e.row),
    );
    // An axis that moves with x adds nothing to the series name: S with T in self-attention sweeps, B in a
    // sweep at constant B·T or B·S (one series over the sweep, not one point per B).
    const seriesAxes = varying.filter(
      (a) => a !== xAxis && !(xAxis !== null && followsAxis(entries, xAxis, a)),
    );
    // Decode steps (rows with bandwidthGBs) are charted in GB/s: ~2 flops a byte make their TFLOP/s small and say
    // nothing of how close they read to the memory's peak; the other rows in TFLOP/s (a group of both gets both).
    const decode = entries.some((e) => e.row.bandwidthGBs !== undefined);
    const other = entries.some((e) => e.row.bandwidthGBs === undefined);
    const rate = MEASURES.filter((m) => (m.key === 'bandwidth' && decode) || (m.key === 'tflops' && other));
    const measures = xAxis ? [MEASURES[0], ...rate] : MEASURES.slice(0, 1);
    for (const measure of measures) {
      const series = new Map<string, ChartPoint[]>();
      for (const { row, file } of entries) {
        const y = measure.value(row);
        if (y === undefined || !(y > 0)) continue;
        const extra = seriesAxes.map((a) => `${a}=${row[a]}`).join(' ');
        const label = `${prefix ? `${file}: ` : ''}${row.label}${extra ? ` ${extra}` : ''}`;
        const points = series.get(label) ?? [];
        points.push({ x: xAxis ? row[xAxis] : 0, y });
        series.set(label, points);
      }
      if (series.size === 0) continue;
      const all = [...series.values()].flat();
      const ys = all.map((p) => p.y);
      const shape = describeFixed(
        entries.map((e) => e.row),
        varying,
      );
      charts.push({
        id: `chart-${charts.length + 1}-${slug(sweep)}-${measure.key}`,
        sweep,
        measure: measure.key as 'ms' | 'tflops' | 'bandwidth',
        kind: xAxis ? 'line' : 'bar',
        title: `${sweepTitle(sweep)}: ${measure.name.toLowerCase()}${xAxis ? ` vs ${AXIS_NAMES[xAxis]}` : ''} (${shape})`,
        xLabel: xAxis ? AXIS_NAMES[xAxis] : '',
        yLabel: `${measure.name} (${measure.unit})`,
        logX: xAxis !== null && doubles(all.map((p) => p.x)),
        logY: Math.max(...ys) / Math.min(...ys) > 20,
        series: [...series].map(([label, points]) => ({ label, points: points.sort((a, b) => a.x - b.x) })),
      });
    }
  }
  return charts;
}

function pickXAxis(varying: readonly Axis[], rows: readonly ResultRow[]): Axis | null {
  let best: Axis | null = null;
  let bestCount = 1;
  for (const axis of varying) {
    const count = new Set(rows.map((r) => r[axis])).size;
    if (count > bestCount) [best, bestCount] = [axis, count];
  }
  return best;
}

/** True when every value of `x` comes with one value of `a` across the entries (a is a function of x). */
function followsAxis(entries: readonly { row: ResultRow }[], x: Axis, a: Axis): boolean {
  const seen = new Map<number, number>();
  for (const { row } of entries) {
    const previous = seen.get(row[x]);
    if (previous !== undefined && previous !== row[a]) return false;
    seen.set(row[x], row[a]);
  }
  return true;
}

/** True when the sorted distinct values grow by powers of two (64, 128, 256… or 1, 2, 8). */
export function doubles(values: readonly number[]): boolean {
  const sorted = [...new Set(values)].sort((a, b) => a - b);
  if (sorted.length < 2 || sorted[0] <= 0) return false;
  for (let i = 1; i < sorted.length; i++) {
    const ratio = Math.log2(sorted[i] / sorted[i - 1]);
    if (Math.abs(ratio - Math.round(ratio)) > 1e-9) return false;
  }
  return true;
}

/** The dimensions that stay fixed over the group, e.g. 'B=4 N=8 H=64'. */
function describeFixed(rows: readonly ResultRow[], varying: readonly Axis[]): string {
  const fixed = (['B', 'T', 'S', 'N', 'K', 'H'] as const).filter((a) => !varying.includes(a));
  const parts = fixed
    .filter((a) => !(a === 'S' && fixed.includes('T') && rows[0].S === rows[0].T))
    .filter((a) => !(a === 'K' && fixed.includes('N') && rows[0].K === rows[0].N))
    .map((a) => `${a}=${rows[0][a]}`);
  return parts.join(' ') || 'all sizes vary';
}

function slug(text: string): string {
  return (
    text
      .toLowerCase()
      .replace(/[^a-z0-9]+/g, '-')
      .replace(/^-|-$/g, '') || 'group'
  );
}
