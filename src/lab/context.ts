/**
 * What the lab's sections share: the device they run on, the sizes for it, how to print, and the
 * tables, rows and notes collected for the results file. Each section prints as it finishes, so a
 * learner sees the lab advance instead of one wall of text at the end.
 */
import type { MeasureOptions } from '../bench/measure.js';
import { type CodelabSizes, codelabSizes } from '../bench/presets.js';
import { renderResultRows } from '../report/results-terminal.js';
import { renderBars, renderTable, TERMINAL_WIDTH, wrapText } from '../report/terminal.js';
import type { CeilingInfo, LabSection, ResultRow, ResultsFile, ResultTable } from '../results/schema.js';

export interface LabOptions {
  /** Shorter sweeps (sequence up to 1024 on a GPU). */
  quick: boolean;
  /** Timed-call budget per measured case, ms. */
  budgetMs: number;
  color: boolean;
  /** Where text goes (stdout by default). */
  write: (text: string) => void;
  /**
   * Called with the results so far after each section: a lab stopped part-way (a time limit on a
   * lent GPU machine) still leaves the sections it finished.
   */
  onSection?: (partial: ResultsFile, section: string) => void;
  /** Aborted (a stop signal): no section starts after it; the one running ends first. */
  signal?: AbortSignal;
}

export class LabContext {
  readonly device: 'cuda' | 'cpu';
  readonly sizes: CodelabSizes;
  readonly tables: ResultTable[] = [];
  readonly rows: ResultRow[] = [];
  readonly notes: string[] = [];
  /** The sections as the terminal showed them, for the HTML report's layout. */
  readonly sections: LabSection[] = [];
  /** Set by the cuDNN section, as the codelab's HAS_CUDNN_SDPA: later sections add cuDNN rows only then. */
  hasCudnn = false;
  /** Resolved once, before the first timed section. */
  ceiling: CeilingInfo | null = null;

  constructor(
    device: 'cuda' | 'cpu',
    readonly options: LabOptions,
  ) {
    this.device = device;
    this.sizes = codelabSizes(device, !options.quick);
  }

  /** Implementation names as the codelab's roles: 'naive' from scratch and the fused one. */
  get naiveImpl(): 'naive' | 'reference' {
    return this.device === 'cuda' ? 'naive' : 'reference';
  }

  get fusedImpl(): 'flash' {
    return 'flash';
  }

  /** Measurement settings: the lab's budget, fewer repeats than bench (it is a tour, not a study). */
  measure(sweep: string): Partial<MeasureOptions> {
    return {
      sweep,
      warmup: 3,
      repeats: 50,
      minRepeats: this.device === 'cuda' ? 10 : 3,
      budgetMs: this.options.budgetMs,
      checkError: true,
      ceilingTflops: this.ceiling?.tflops ?? null,
    };
  }

  heading(title: string): void {
    this.sections.push({ title, text: [], tables: [], sweeps: [] });
    this.options.write(
      `\n${'═'.repeat(Math.min(100, title.length + 4))}\n  ${title}\n${'═'.repeat(Math.min(100, title.length + 4))}`,
    );
  }

  /** Prints terminal-only output (a text chart, a stack trace): the report draws its own. */
  say(text: string): void {
    this.options.write(text);
  }

  /** Prints an explanation, wrapped, and keeps it with its section for the report. */
  explain(text: string): void {
    this.options.write(wrapText(text));
    this.sections.at(-1)?.text.push(text);
  }

  /** Prints a table and keeps it for the results file. */
  table(title: string, headers: string[], rows: string[][], note?: string): void {
    this.tables.push({ title, headers, rows, ...(note ? { note } : {}) });
    this.sections.at(-1)?.tables.push(title);
    this.options.write(renderTable(headers, rows, { title, color: this.options.color }));
    if (note) this.options.write(wrapText(note));
  }

  /** Prints measured rows as a table and keeps them. */
  timed(title: string, rows: ResultRow[]): void {
    this.rows.push(...rows);
    const section = this.sections.at(-1);
    for (const sweep of new Set(rows.map((r) => r.sweep)))
      if (section && !section.sweeps.includes(sweep)) section.sweeps.push(sweep);
    this.options.write(renderResultRows(rows, { title, color: this.options.color }));
  }

  bars(title: string, items: { label: string; value: number }[], unit: string): void {
    this.options.write(renderBars(items, { title, unit, lowerIsBetter: true, color: this.options.color }));
  }

  note(text: string): void {
    this.notes.push(text);
    this.sections.at(-1)?.text.push(`Note: ${text}`);
    this.options.write(wrapText(`note: ${text}`, TERMINAL_WIDTH, '      '));
  }
}
