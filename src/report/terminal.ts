/**
 * Terminal output: aligned tables (cli-table3) and horizontal bar charts, both at most 100 columns
 * wide so they survive a default terminal and a CI log, coloured only when stdout is a TTY and
 * NO_COLOR is unset (colour codes in a log file are noise).
 */
import Table from 'cli-table3';
import picocolors from 'picocolors';

/** The widest line any renderer here produces. */
export const TERMINAL_WIDTH = 100;

/**
 * The one rule for colour, for every command: on a TTY, unless NO_COLOR is set to anything but ''
 * (no-color.org). The project reads no FORCE_COLOR.
 */
export function colorEnabled(stream: { isTTY?: boolean } = process.stdout): boolean {
  return Boolean(stream.isTTY) && !process.env.NO_COLOR;
}

/** picocolors' functions, colouring when colorEnabled says so. */
export function colorsFor(
  stream: { isTTY?: boolean } = process.stdout,
): ReturnType<typeof picocolors.createColors> {
  return picocolors.createColors(colorEnabled(stream));
}

export interface TableOptions {
  title?: string;
  /** Per column; numbers read best right-aligned. Default: left. */
  align?: readonly ('left' | 'right')[];
  color?: boolean;
  /** Rules between body rows, for tables whose rows span several lines. */
  rowLines?: boolean;
}

/**
 * A table that fits TERMINAL_WIDTH: when the cells' natural widths do not fit, the widest columns
 * are narrowed (and their text wrapped) until the table does.
 */
export function renderTable(
  headers: readonly string[],
  rows: readonly string[][],
  options: TableOptions = {},
): string {
  const pc = picocolors.createColors(options.color ?? false);
  const natural = headers.map(
    (h, i) => Math.max(longestLine(h), ...rows.map((r) => longestLine(r[i] ?? ''))) + 2,
  );
  // Borders take one column per column plus one.
  const align = headers.map((_, i) => options.align?.[i] ?? 'left');
  const colWidths = fitWidths(
    natural,
    TERMINAL_WIDTH - (headers.length + 1),
    align.map((a) => a === 'left'),
  );
  const table = new Table({
    head: headers.map((h) => pc.bold(h)),
    colWidths,
    wordWrap: true,
    colAligns: align,
    // Without rowLines no rule between body rows: long single-line tables stay short.
    chars: options.rowLines ? {} : { mid: '', 'left-mid': '', 'mid-mid': '', 'right-mid': '' },
    style: { head: [], border: [], 'padding-left': 1, 'padding-right': 1 },
  });
  for (const row of rows) table.push([...row]);
  const title = options.title ? `${pc.bold(pc.cyan(truncate(options.title, TERMINAL_WIDTH)))}\n` : '';
  return title + table.toString();
}

/**
 * Column widths summing to at most `budget`. Text columns (`wrappable`) give way first, widest
 * first: wrapped words read fine, a wrapped number does not. Never below 6 columns.
 */
export function fitWidths(
  natural: readonly number[],
  budget: number,
  wrappable?: readonly boolean[],
): number[] {
  const widths = [...natural];
  let total = widths.reduce((a, b) => a + b, 0);
  for (const onlyWrappable of [true, false]) {
    while (total > budget) {
      let widest = -1;
      widths.forEach((w, i) => {
        if ((!onlyWrappable || (wrappable?.[i] ?? true)) && w > 6 && (widest < 0 || w > widths[widest]))
          widest = i;
      });
      if (widest < 0) break;
      widths[widest]--;
      total--;
    }
  }
  return widths;
}

export interface BarItem {
  label: string;
  value: number;
  /** Shown after the bar instead of the bare value, e.g. '0.12 ms (p10 0.11, p90 0.13)'. */
  text?: string;
}

export interface BarOptions {
  title?: string;
  unit?: string;
  lowerIsBetter?: boolean;
  color?: boolean;
}

const EIGHTHS = ['', '▏', '▎', '▍', '▌', '▋', '▊', '▉'];

/**
 * Horizontal bars scaled to the largest value, one line per item: label, bar, value. Labels longer
 * than 32 columns are cut so the bar keeps at least a third of the width.
 */
export function renderBars(items: readonly BarItem[], options: BarOptions = {}): string {
  const pc = picocolors.createColors(options.color ?? false);
  const unit = options.unit ? ` ${options.unit}` : '';
  const texts = items.map((item) => item.text ?? `${formatNumber(item.value)}${unit}`);
  const labelWidth = Math.min(32, Math.max(0, ...items.map((i) => i.label.length)));
  const textWidth = Math.min(36, Math.max(0, ...texts.map((t) => t.length)));
  const barWidth = Math.max(10, TERMINAL_WIDTH - labelWidth - textWidth - 4);
  const max = Math.max(0, ...items.map((i) => i.value)) || 1;
  const lines: string[] = [];
  if (options.title) lines.push(pc.bold(pc.cyan(truncate(options.title, TERMINAL_WIDTH))));
  items.forEach((item, i) => {
    const eighths = Math.max(1, Math.round((Math.max(0, item.value) / max) * barWidth * 8));
    const bar = '█'.repeat(Math.floor(eighths / 8)) + EIGHTHS[eighths % 8];
    const paint = options.lowerIsBetter ? pc.blue : pc.green;
    lines.push(
      `${truncate(item.label, labelWidth).padEnd(labelWidth)}  ${paint(bar.padEnd(barWidth))}  ${truncate(texts[i], textWidth)}`,
    );
  });
  if (items.length > 0) lines.push(pc.dim(`${options.lowerIsBetter ? 'Lower' : 'Higher'} is better.`));
  return lines.join('\n');
}

/**
 * Prose as lines of at most `width` columns, broken between words; lines after the first start
 * with `indent`. Words longer than a line (a path) stay whole. Existing line breaks are kept.
 */
export function wrapText(text: string, width = TERMINAL_WIDTH, indent = ''): string {
  const lines: string[] = [];
  for (const paragraph of text.split('\n')) {
    let line = '';
    for (const word of paragraph.split(' ')) {
      const prefix = lines.length > 0 && line === '' ? indent : '';
      if (line !== '' && [...line].length + 1 + [...word].length > width) {
        lines.push(line);
        line = `${indent}${word}`;
      } else {
        line = line === '' ? `${prefix}${word}` : `${line} ${word}`;
      }
    }
    lines.push(line);
  }
  return lines.join('\n');
}

/** Cuts text to `width` columns, marking the cut with '…'. */
export function truncate(text: string, width: number): string {
  return text.length <= width ? text : `${text.slice(0, Math.max(0, width - 1))}…`;
}

/** Three significant digits, without exponent notation in the range benchmarks produce. */
export function formatNumber(value: number): string {
  if (!Number.isFinite(value)) return String(value);
  const abs = Math.abs(value);
  if (abs === 0) return '0';
  if (abs >= 1000) return value.toFixed(0);
  if (abs >= 0.01) return value.toPrecision(3);
  return value.toExponential(2);
}

function longestLine(text: string): number {
  return Math.max(...text.split('\n').map((l) => l.length));
}
