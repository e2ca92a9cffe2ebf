/**
 * A lab run's HTML report, laid out as the terminal showed it: one numbered section per lab section
 * with its explanations, its tables, and its charts (each with what it shows). A recorded run of the
 * same lab on a GPU (report/recorded.ts), when given, sits beside a CPU run: its tables and
 * explanations under each section, its rows in the same charts, drawn dashed.
 */
import type { LabSection, ResultRow, ResultTable } from '../results/schema.js';
import { type ChartSpec, chartsFor, type NamedResults } from './charts.js';
import { chartFigure, escapeHtml, machineTable, rowsTable, section, tableSection } from './html-parts.js';
import { recordedLabel } from './recorded.js';
import { comparisonNotes } from './settings.js';

/** '8b' of '8b. Sweep the sequence length': sections of two runs of the lab match by it. */
function sectionNumber(title: string): string {
  return /^(\d+[a-z]?)\./.exec(title)?.[1] ?? title;
}

function rowsOf(rows: readonly ResultRow[], sweeps: readonly string[]): ResultRow[] {
  return rows.filter((r) => sweeps.includes(r.sweep));
}

function paragraphs(text: readonly string[]): string {
  return text.map((t) => `<p class="explain">${escapeHtml(t)}</p>`).join('');
}

/** The body of a lab report and every chart in it (ids unique over the page). */
export function labReportBody(
  file: NamedResults,
  beside: NamedResults | null,
  title: string,
): { body: string; charts: ChartSpec[] } {
  const own = file.results;
  // Short: chart legends and bar labels carry these names before every series.
  const ownName = beside ? 'this run' : 'lab';
  const besideName = beside
    ? `recorded ${(beside.results.machine.gpu?.name ?? 'run').replace(/^NVIDIA\s+/, '')}`
    : '';
  const charts: ChartSpec[] = [];
  const parts: string[] = [
    `<h1>${escapeHtml(title)}</h1>`,
    `<p class="meta">${escapeHtml(own.createdAt)} — <code>${escapeHtml(own.command)}</code></p>`,
  ];
  if (beside) {
    parts.push(
      `<p class="explain recorded">Beside this run: a recorded run of the same lab on ${escapeHtml(recordedLabel(beside.results))} ` +
        `(<code>${escapeHtml(beside.results.command)}</code>). Its tables follow each section's own, and its rows share ` +
        'the charts, dashed, so each level of the codelab shows what it buys on a GPU. The GPU runs larger sizes: compare shapes, not single numbers.</p>',
    );
  }
  parts.push(
    section(
      'Machines and versions',
      machineTable({ ...file, name: ownName }) +
        (beside ? machineTable({ ...beside, name: `${besideName} (${recordedLabel(beside.results)})` }) : ''),
    ),
  );
  const notes = comparisonNotes(beside ? [file, beside] : [file]);
  const inSections = new Set((own.sections ?? []).flatMap((s) => s.text));
  const loose = own.notes.filter((n) => !inSections.has(`Note: ${n}`));
  if (notes.length + loose.length > 0) {
    parts.push(
      section('Notes', `<ul>${[...notes, ...loose].map((n) => `<li>${escapeHtml(n)}</li>`).join('')}</ul>`),
    );
  }
  const theirs = new Map((beside?.results.sections ?? []).map((s) => [sectionNumber(s.title), s]));
  const usedTables = new Set<number>();
  for (const s of own.sections ?? []) {
    const html: string[] = [paragraphs(s.text)];
    for (const t of s.tables) {
      const index = own.tables.findIndex((table, i) => table.title === t && !usedTables.has(i));
      if (index < 0) continue;
      usedTables.add(index);
      html.push(
        tableSection(own.tables[index], '')
          .replace(/<h2>/, '<h3>')
          .replace(/<\/h2>/, '</h3>'),
      );
    }
    const other: LabSection | undefined = theirs.get(sectionNumber(s.title));
    if (beside && other) html.push(recordedPart(beside, other, besideName));
    const files: NamedResults[] = [{ name: ownName, results: { ...own, rows: rowsOf(own.rows, s.sweeps) } }];
    if (beside && other)
      files.push({
        name: besideName,
        results: { ...beside.results, rows: rowsOf(beside.results.rows, other.sweeps) },
      });
    const specs = chartsFor(files.filter((f) => f.results.rows.length > 0)).map((c) => ({
      ...c,
      id: `${c.id}-s${charts.length}`,
    }));
    charts.push(...specs);
    html.push(specs.map(chartFigure).join(''));
    parts.push(`<section><h2>${escapeHtml(s.title)}</h2>${html.join('')}</section>`);
  }
  parts.push(
    section(
      'All rows',
      `<details><summary>${own.rows.length} timed rows of this run${beside ? ` and ${beside.results.rows.length} of the recorded one` : ''}, every measure</summary>${rowsTable(
        beside
          ? [
              { ...file, name: 'this run' },
              { ...beside, name: 'recorded' },
            ]
          : [file],
      )}</details>`,
    ),
  );
  return { body: parts.join('\n'), charts };
}

/** The recorded run's explanations and tables of one section, marked as recorded. */
function recordedPart(beside: NamedResults, s: LabSection, name: string): string {
  const tables = s.tables
    .map((t) => beside.results.tables.find((table) => table.title === t))
    .filter((t): t is ResultTable => t !== undefined)
    .map((t) =>
      tableSection(t, '')
        .replace(/<h2>/, '<h3>')
        .replace(/<\/h2>/, '</h3>'),
    );
  if (tables.length === 0 && s.text.length === 0) return '';
  return `<div class="recorded"><p class="note"><strong>${escapeHtml(name)}</strong></p>${paragraphs(s.text)}${tables.join('')}</div>`;
}
