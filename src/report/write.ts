/**
 * One entry point for showing results: the terminal text (machines, rows, each chart as a table or
 * bars) and, when a path is given, the HTML report beside it. Both read only results files.
 */
import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import { writeFileAtomic } from '../results/files.js';
import { chartsFor, type NamedResults } from './charts.js';
import { buildHtmlReport } from './html.js';
import { renderChartText, renderMachine, renderResultRows } from './results-terminal.js';
import { comparisonNotes } from './settings.js';
import { renderTable } from './terminal.js';

export interface WriteReportOptions {
  /** Write the HTML report here (folders are created). */
  htmlPath?: string;
  /** Colour the terminal text (callers pass colorEnabled(), terminal.ts). */
  color?: boolean;
  title?: string;
  /** Build the terminal text (default true); false returns '' and only writes the HTML (report --no-terminal). */
  terminal?: boolean;
  /** A lab report only: a recorded run of the same lab shown beside this one (report/recorded.ts). */
  beside?: NamedResults | null;
}

/** The terminal text for `files`; writes the HTML report too when `htmlPath` is set. */
export function writeReport(files: readonly NamedResults[], options: WriteReportOptions = {}): string {
  const color = options.color ?? false;
  const parts: string[] = [];
  if (options.htmlPath) {
    mkdirSync(dirname(options.htmlPath), { recursive: true });
    writeFileAtomic(
      options.htmlPath,
      buildHtmlReport(files, { title: options.title, beside: options.beside ?? null }),
    );
  }
  // The tables are built only when printed: 10k rows of them took 9.6 s that --no-terminal then threw away.
  if (options.terminal === false) return '';
  for (const file of files) {
    parts.push(renderMachine(file.results, { color }));
    for (const table of file.results.tables) {
      parts.push(renderTable(table.headers, table.rows, { title: table.title, color }));
    }
    parts.push(
      renderResultRows(file.results.rows, { title: `${file.name}: ${file.results.rows.length} rows`, color }),
    );
    for (const note of file.results.notes) parts.push(`note: ${note}`);
  }
  for (const note of comparisonNotes(files)) parts.push(`note: ${note}`);
  for (const chart of chartsFor(files)) parts.push(renderChartText(chart, { color }));
  return parts.join('\n\n');
}
