/**
 * Results in the terminal: the per-row table of a bench run, and each chart as a line chart (sweeps)
 * or as bars (single-shape groups).
 */

import { formatBytes } from '../errors.js';
import type { ResultRow, ResultsFile } from '../results/schema.js';
import { shapeLabel } from '../results/shape-label.js';
import type { ChartSpec } from './charts.js';
import { renderLineChart } from './line-chart.js';
import { settingsLine } from './settings.js';
import { formatNumber, renderBars, renderTable } from './terminal.js';

const ROW_HEADERS = [
  'series',
  'B×T×N×H',
  'p50\np10–p90',
  'host\n1st call',
  'TFLOP/s\n%peak',
  'GB/s\n%HBM',
  'peak mem',
  'max err',
];
const ROW_ALIGN = ['left', 'right', 'right', 'right', 'right', 'right', 'right', 'right'] as const;

/** A duration in the unit that keeps it short: 61.2 µs, 5.56 ms, 1.20 s. */
export function formatDuration(ms: number): string {
  const [value, unit] = durationUnit(ms);
  return `${formatNumber(ms / value)} ${unit}`;
}

function durationUnit(ms: number): [number, string] {
  if (ms < 1) return [1e-3, 'µs'];
  if (ms < 1000) return [1, 'ms'];
  return [1000, 's'];
}

/** Bytes with three significant digits: 34.0 MiB, 2.16 GiB. */
function shortBytes(bytes: number): string {
  const [value, unit] = formatBytes(bytes).split(' ');
  return `${formatNumber(Number(value))} ${unit}`;
}

/** A rate over its share of a peak (TFLOP/s of the matmul ceiling, a decode step's GB/s of HBM), or '—'. */
function rateCell(rate: number | undefined, percent: number | undefined): string {
  const text = rate !== undefined ? formatNumber(rate) : '—';
  return percent !== undefined ? `${text}\n${percent.toFixed(1)}%` : text;
}

/**
 * One table row per result row, within 100 columns: each cell holds two related numbers one over
 * the other (median over its p10–p90 range in the same unit, host time per call over the first
 * call, TFLOP/s over the share of the matmul ceiling, a decode step's GB/s over its share of the HBM
 * peak); numbers never wrap, a long series name
 * does. Rows that did not run say why underneath the table.
 */
export function renderResultRows(
  rows: readonly ResultRow[],
  options: { title?: string; color?: boolean } = {},
): string {
  const cells = rows.map((row) => {
    const t = row.timing;
    let time: string = row.status;
    if (t) {
      const [value] = durationUnit(t.ms.median);
      time = `${formatDuration(t.ms.median)}\n${formatNumber(t.ms.p10 / value)}–${formatNumber(t.ms.p90 / value)}`;
    }
    const host = t?.hostMs ? `${formatDuration(t.hostMs.median)}\n` : '';
    return [
      // The source is attnlab unless the label names a peer: the prefix only costs width here.
      row.label.replace(/^attnlab /, ''),
      shapeLabel(row),
      time,
      t ? `${host}${formatDuration(t.firstCallMs)}` : '—',
      rateCell(row.tflops, row.ceilingPercent),
      rateCell(row.bandwidthGBs, row.bandwidthPercent),
      row.peakMemoryBytes != null ? shortBytes(row.peakMemoryBytes) : '—',
      row.maxError != null
        ? `${row.maxError.toExponential(1)}${row.errorCheck === 'sampled' ? '*' : ''}`
        : '—',
    ];
  });
  // Columns no row fills (memory on the CPU, errors with --no-check) only cost width.
  const keep = ROW_HEADERS.map((_, i) => i < 3 || cells.some((r) => r[i] !== '—'));
  const pick = <T>(items: readonly T[]) => items.filter((_, i) => keep[i]);
  // Second header lines only where some row has that number (no host time or ceiling on the CPU).
  const headers = ROW_HEADERS.map((h) =>
    h
      .replace('host\n', rows.some((r) => r.timing?.hostMs) ? 'host\n' : '')
      .replace('\n%peak', rows.some((r) => r.ceilingPercent !== undefined) ? '\n%peak' : '')
      .replace('\n%HBM', rows.some((r) => r.bandwidthPercent !== undefined) ? '\n%HBM' : ''),
  );
  const table = renderTable(pick(headers), cells.map(pick), {
    title: options.title,
    align: pick(ROW_ALIGN),
    color: options.color,
    rowLines: true,
  });
  const notes = rows
    .filter((r) => r.status !== 'ok')
    .map((r) => `  ${r.label} ${shapeLabel(r)}: ${r.status}: ${r.reason}`);
  const sampled = rows.some((r) => r.errorCheck === 'sampled')
    ? ['  * max err over 4 query rows of 8 (b, n) pairs (large problems); the others are full checks.']
    : [];
  return [table, ...notes, ...sampled].join('\n');
}

/** A chart as text: bars for a single-shape group, a line chart (line-chart.ts) for a sweep. */
export function renderChartText(chart: ChartSpec, options: { color?: boolean } = {}): string {
  if (chart.kind === 'line') return renderLineChart(chart, options);
  const items = chart.series.map((s) => ({ label: s.label, value: s.points[0]?.y ?? 0 }));
  const unit = /\(([^)]+)\)$/.exec(chart.yLabel)?.[1] ?? '';
  return renderBars(items, {
    title: chart.title,
    unit,
    lowerIsBetter: unit === 'ms',
    color: options.color,
  });
}

/** The machine and versions of a results file, as key/value lines. */
export function renderMachine(results: ResultsFile, options: { color?: boolean } = {}): string {
  const m = results.machine;
  const settings = settingsLine(m);
  const rows: string[][] = [
    [
      'device',
      m.gpu ? `${m.gpu.name} (sm ${m.gpu.computeCapability}, ${formatBytes(m.gpu.memoryBytes)})` : m.cpu,
    ],
    ...(m.gpu?.driver ? [['driver', m.gpu.driver]] : []),
    ...(m.gpu?.uuid ? [['GPU UUID', m.gpu.uuid]] : []),
    ...(m.gpu?.powerLimitWatts ? [['power limit', `${m.gpu.powerLimitWatts} W`]] : []),
    ...Object.entries(m.libraries).map(([k, v]) => [k, v]),
    ...(settings ? [['settings', settings]] : []),
    ['node', m.node],
    [
      'attnlab',
      results.attnlab.commit === 'unknown'
        ? results.attnlab.version
        : `${results.attnlab.version} (${results.attnlab.commit})`,
    ],
    ...(results.ceiling
      ? [
          [
            'matmul ceiling',
            `${formatNumber(results.ceiling.tflops)} TFLOP/s ${results.ceiling.dtype} (${results.ceiling.source})`,
          ],
        ]
      : []),
    ...results.peers.map((p) => [
      `peer ${p.name}`,
      p.available
        ? Object.entries(p.versions ?? {})
            .map(([k, v]) => `${k} ${v}`)
            .join(', ')
        : `missing: ${p.reason}`,
    ]),
  ];
  return renderTable(['', 'value'], rows, { title: 'Machine', color: options.color });
}
