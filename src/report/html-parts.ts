/**
 * The pieces of the HTML report: escaping, the style, tables, the machine table, chart figures and
 * the rows table. html.ts lays out a bench or comparison report with them, html-lab.ts a lab run.
 */
import { formatBytes } from '../errors.js';
import type { ResultRow, ResultTable } from '../results/schema.js';
import { shapeLabel } from '../results/shape-label.js';
import type { ChartSpec, NamedResults } from './charts.js';
import { comparisonNotes, settingsLine } from './settings.js';
import { chartShows } from './sweep-text.js';
import { formatNumber } from './terminal.js';

/** Text safe to place in HTML element content and attribute values. */
export function escapeHtml(text: string): string {
  return text
    .replace(/&/g, '&amp;')
    .replace(/</g, '&lt;')
    .replace(/>/g, '&gt;')
    .replace(/"/g, '&quot;')
    .replace(/'/g, '&#39;');
}

/** JSON that is safe inside a <script> element: '<' (and the JS line separators) as escapes. */
export function jsonForScript(value: unknown): string {
  return JSON.stringify(value)
    .replace(/</g, '\\u003c')
    .replace(/\u2028/g, '\\u2028')
    .replace(/\u2029/g, '\\u2029');
}

export const STYLE = `body{font-family:system-ui,-apple-system,Segoe UI,Arial,sans-serif;margin:24px auto;max-width:1100px;color:#1f2328;padding:0 16px}
h1{font-size:24px}h2{font-size:19px;margin-top:32px;border-bottom:1px solid #d0d7de;padding-bottom:4px}h3{font-size:15px}
table{border-collapse:collapse;font-size:13px;margin:8px 0;min-width:50%}table.wide{width:100%}th,td{border-bottom:1px solid #eef1f4;padding:4px 6px;text-align:left;vertical-align:top}
th{border-bottom:1px solid #d0d7de}td.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.meta{color:#57606a;font-size:13px}.note{color:#57606a;font-size:13px}.chart{position:relative;height:360px}
figure{margin:16px 0 28px 0}code{font-size:12px}.bad{color:#d1242f}
.scroll{overflow-x:auto;max-width:100%}td{overflow-wrap:break-word}td.n{overflow-wrap:normal}
.explain{max-width:760px}.recorded{border-left:3px solid #8250df;padding-left:12px;margin:12px 0}
details>summary{cursor:pointer;color:#0969da;margin:8px 0}pre.text{white-space:pre-wrap;font-size:12px}`;

export function section(heading: string, html: string): string {
  return `<section><h2>${escapeHtml(heading)}</h2>${html}</section>`;
}

/** A table as HTML; `numeric` right-aligns those columns. The notebook shows its tables with it. */
export function simpleTable(
  headers: readonly string[],
  rows: readonly string[][],
  numeric: readonly boolean[] = [],
  className = '',
): string {
  // A key/value table (no header text) reads better without an empty header row.
  const head = headers.some((h) => h) ? headers.map((h) => `<th>${escapeHtml(h)}</th>`).join('') : '';
  const body = rows
    .map(
      (r) =>
        `<tr>${r.map((c, i) => `<td${numeric[i] ? ' class="n"' : ''}>${escapeHtml(c)}</td>`).join('')}</tr>`,
    )
    .join('');
  const thead = head ? `<thead><tr>${head}</tr></thead>` : '';
  // Wide tables scroll inside their box: an 800 px page keeps its width.
  return `<div class="scroll"><table${className ? ` class="${className}"` : ''}>${thead}<tbody>${body}</tbody></table></div>`;
}

export function machineTable(file: NamedResults): string {
  const { machine, attnlab, ceiling, peers } = file.results;
  const settings = settingsLine(machine);
  const rows: string[][] = [
    [
      'device',
      machine.gpu
        ? `${machine.gpu.name} (sm ${machine.gpu.computeCapability}, ${formatBytes(machine.gpu.memoryBytes)})`
        : `CPU only: ${machine.cpu}`,
    ],
    ...(machine.gpu?.driver ? [['driver', machine.gpu.driver]] : []),
    ...(machine.gpu?.uuid ? [['GPU UUID', machine.gpu.uuid]] : []),
    ...(machine.gpu?.powerLimitWatts ? [['power limit', `${machine.gpu.powerLimitWatts} W`]] : []),
    ...Object.entries(machine.libraries),
    ...(settings ? [['settings', settings]] : []),
    ['host', `${machine.hostname} (${machine.platform}), Node.js ${machine.node}`],
    ['attnlab', `${attnlab.version}, commit ${attnlab.commit}`],
    [
      'matmul ceiling',
      ceiling ? `${formatNumber(ceiling.tflops)} TFLOP/s ${ceiling.dtype} (${ceiling.source})` : 'not known',
    ],
    ...peers.map((p) => [
      `peer ${p.name}`,
      p.available
        ? `${Object.entries(p.versions ?? {})
            .map(([k, v]) => `${k} ${v}`)
            .join(', ')} (${p.python ?? ''})`
        : `not run: ${p.reason ?? ''}`,
    ]),
  ];
  return `<h3>${escapeHtml(file.name)}</h3>${simpleTable(['', ''], rows)}`;
}

export function notesSection(files: readonly NamedResults[]): string {
  const notes = [
    ...comparisonNotes(files),
    ...files.flatMap((f) => f.results.notes.map((n) => (files.length > 1 ? `${f.name}: ${n}` : n))),
  ];
  if (notes.length === 0) return '';
  return section('Notes', `<ul>${notes.map((n) => `<li>${escapeHtml(n)}</li>`).join('')}</ul>`);
}

/** A results table with its title as a heading. */
export function tableSection(table: ResultTable, fileName: string): string {
  const note = table.note ? `<p class="note">${escapeHtml(table.note)}</p>` : '';
  const numeric = table.headers.map(
    (_, i) => table.rows.length > 0 && table.rows.every((r) => /^[-+]?[\d.]+(e[-+]?\d+)?$/i.test(r[i])),
  );
  return section(
    fileName ? `${fileName}: ${table.title}` : table.title,
    simpleTable(table.headers, table.rows, numeric) + note,
  );
}

export function chartFigure(chart: ChartSpec): string {
  const axes =
    chart.kind === 'bar'
      ? `${chart.logY ? 'log' : 'linear'} value axis`
      : `${chart.logX ? 'log₂ x axis' : 'linear x axis'}, ${chart.logY ? 'log y axis' : 'linear y axis'}`;
  const shows = chartShows(chart);
  const caption = `${escapeHtml(chart.yLabel)}; ${axes}.${shows ? `<br><strong>What this shows:</strong> ${escapeHtml(shows)}` : ''}`;
  return `<figure><h3>${escapeHtml(chart.title)}</h3><div class="chart"><canvas id="${escapeHtml(chart.id)}" role="img" aria-label="${escapeHtml(chart.title)}"></canvas></div><figcaption class="note">${caption}</figcaption></figure>`;
}

export function rowsTable(files: readonly NamedResults[]): string {
  const multi = files.length > 1;
  const headers = [
    ...(multi ? ['file'] : []),
    'sweep',
    'series',
    'B×T×N×H',
    'ms p50',
    'p10',
    'p90',
    'host ms',
    '1st call ms',
    'TFLOP/s',
    '% peak',
    'GB/s',
    '% HBM',
    'peak mem',
    'max err',
    'timing',
    'status / variant',
  ];
  const cell = (v: number | undefined | null, f: (x: number) => string = formatNumber): string =>
    v === undefined || v === null ? '—' : f(v);
  const rows = files.flatMap((f) =>
    f.results.rows.map((r: ResultRow) => [
      ...(multi ? [f.name] : []),
      r.sweep,
      r.label,
      shapeLabel(r),
      cell(r.timing?.ms.median),
      cell(r.timing?.ms.p10),
      cell(r.timing?.ms.p90),
      cell(r.timing?.hostMs?.median),
      cell(r.timing?.firstCallMs),
      cell(r.tflops),
      cell(r.ceilingPercent, (x) => x.toFixed(1)),
      cell(r.bandwidthGBs),
      cell(r.bandwidthPercent, (x) => x.toFixed(1)),
      cell(r.peakMemoryBytes, formatBytes),
      cell(r.maxError, (x) => `${x.toExponential(1)}${r.errorCheck === 'sampled' ? ' (sampled)' : ''}`),
      r.timing ? `${r.timing.method}, ${r.timing.ms.count} calls, ${r.timing.inputCopies} input copies` : '—',
      r.status === 'ok' ? (r.variant ?? 'ok') : `${r.status}: ${r.reason ?? ''}`,
    ]),
  );
  const offset = multi ? 1 : 0;
  const numeric = headers.map((_, i) => i >= offset + 3 && i <= offset + 14);
  return simpleTable(headers, rows, numeric, 'wide');
}
