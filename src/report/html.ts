/**
 * The HTML report: one self-contained file (chart.js inlined, no network at view time) built only
 * from results JSON. Every string that came from a results file goes through escapeHtml, and the
 * chart data is embedded as JSON with '<' escaped so no value can close the script element.
 */
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { type ChartSpec, chartsFor, type NamedResults } from './charts.js';
import { labReportBody } from './html-lab.js';
import {
  chartFigure,
  escapeHtml,
  jsonForScript,
  machineTable,
  notesSection,
  rowsTable,
  STYLE,
  section,
  tableSection,
} from './html-parts.js';
import { CHART_BOOT_SCRIPT } from './html-script.js';

export { escapeHtml, jsonForScript, simpleTable } from './html-parts.js';

/** The minified chart.js UMD bundle from node_modules (its package exports do not list dist/). */
export function chartJsSource(): string {
  const require = createRequire(import.meta.url);
  const main = require.resolve('chart.js'); // …/chart.js/dist/chart.cjs
  return readFileSync(join(dirname(main), 'chart.umd.min.js'), 'utf8').replace(/<\/script/gi, '<\\/script');
}

/** The whole report for one or more results files (several: compared on the same charts). */
export function buildHtmlReport(
  files: readonly NamedResults[],
  options: { title?: string; beside?: NamedResults | null } = {},
): string {
  const title =
    options.title ?? (files.length === 1 ? `attnlab ${files[0].results.kind} results` : 'attnlab comparison');
  // A lab run with its sections is laid out as the terminal showed it (html-lab.ts).
  if (files.length === 1 && files[0].results.sections?.length) {
    const lab = labReportBody(files[0], options.beside ?? null, title);
    return page(title, lab.body, lab.charts);
  }
  const charts = chartsFor(files);
  const body = [
    `<h1>${escapeHtml(title)}</h1>`,
    `<p class="meta">${files.map((f) => `${escapeHtml(f.name)}: ${escapeHtml(f.results.createdAt)} — <code>${escapeHtml(f.results.command)}</code>`).join('<br>')}</p>`,
    section('Machines and versions', files.map(machineTable).join('')),
    notesSection(files),
    ...files.flatMap((f) => f.results.tables.map((t) => tableSection(t, files.length > 1 ? f.name : ''))),
    section('Charts', charts.map(chartFigure).join('') || '<p>No timed rows.</p>'),
    section('All rows', rowsTable(files)),
  ].join('\n');
  return page(title, body, charts);
}

/** The page around a report body: the style, chart.js inlined, the chart specs and the script that draws them. */
function page(title: string, body: string, charts: readonly ChartSpec[]): string {
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>${escapeHtml(title)}</title>
<style>${STYLE}</style></head>
<body>
${body}
<script>${chartJsSource()}</script>
<script type="application/json" id="attnlab-charts">${jsonForScript(charts)}</script>
<script>${CHART_BOOT_SCRIPT}</script>
</body></html>
`;
}
