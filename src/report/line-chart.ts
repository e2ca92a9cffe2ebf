/**
 * A sweep as a line chart in the terminal, drawn by asciichart (MIT, no dependencies, one 5 KB file;
 * docs/guide/cli.md says why it was chosen). asciichart plots values by column index and has neither an x
 * axis nor gaps, so this file gives it both: each series segment (consecutive points it has) is
 * resampled onto the columns its x range covers — log2 spacing where the sizes double — and plotted
 * alone on the shared y range, and the plots are laid over one another. Below come the x axis with
 * its sizes and a legend. Series differ by colour on a TTY and by line style everywhere, so a log
 * file (no colour) still tells them apart.
 */
import asciichart from 'asciichart';
import picocolors from 'picocolors';
import type { ChartSeries, ChartSpec } from './charts.js';
import { formatNumber, TERMINAL_WIDTH, truncate } from './terminal.js';

/** Rows of the plot area: enough to separate lines a few percent apart, short enough for a laptop. */
const PLOT_HEIGHT = 12;

/** asciichart's ten symbols (┼ ┤ ╶ ╴ ─ ╰ ╭ ╮ ╯ │) in four line styles. */
type Symbols = [string, string, string, string, string, string, string, string, string, string];
const STYLES: readonly Symbols[] = [
  ['┼', '┤', '╶', '╴', '─', '╰', '╭', '╮', '╯', '│'],
  ['┼', '┤', '╶', '╴', '━', '┗', '┏', '┓', '┛', '┃'],
  ['┼', '┤', '╶', '╴', '═', '╚', '╔', '╗', '╝', '║'],
  ['┼', '┤', '╶', '╴', '┄', '╰', '╭', '╮', '╯', '┆'],
];
const COLORS = ['blue', 'green', 'magenta', 'yellow', 'cyan', 'red'] as const;

/** Which series drew a cell, and with what character. */
interface Cell {
  char: string;
  series: number;
}

export function renderLineChart(chart: ChartSpec, options: { color?: boolean } = {}): string {
  const pc = picocolors.createColors(options.color ?? false);
  const series = chart.series.filter((s) => s.points.length > 0);
  const all = series.flatMap((s) => s.points);
  if (all.length === 0) return '';
  const toY = (y: number) => (chart.logY ? Math.log10(y) : y);
  const fromY = (y: number) => (chart.logY ? 10 ** y : y);
  const toX = (x: number) => (chart.logX ? Math.log2(x) : x);
  let min = Math.min(...all.map((p) => toY(p.y)));
  let max = Math.max(...all.map((p) => toY(p.y)));
  if (max === min) [min, max] = [min - 0.5, max + 0.5]; // a flat chart still needs a range

  const labels = Array.from({ length: PLOT_HEIGHT + 2 }, (_, i) =>
    formatNumber(fromY(max - ((max - min) * i) / PLOT_HEIGHT)),
  );
  const labelWidth = Math.max(...labels.map((l) => l.length));
  const axisWidth = labelWidth + 2; // label, space, axis line
  const width = TERMINAL_WIDTH - axisWidth - 1;
  const xs = [...new Set(all.map((p) => p.x))].sort((a, b) => a - b);
  const [x0, x1] = [toX(xs[0]), toX(xs[xs.length - 1])];
  const column = (x: number) => (x1 === x0 ? 0 : Math.round(((toX(x) - x0) / (x1 - x0)) * (width - 1)));
  const config = { min, max, height: PLOT_HEIGHT };

  // The y axis as asciichart draws it: the label column of a plot of the range itself (with
  // offset 2 its label is slot 0 and the axis slot 1, so the first axisWidth characters).
  const axis = asciichart
    .plot([min, max], {
      ...config,
      offset: 2,
      format: (v) => `${formatNumber(fromY(v)).padStart(labelWidth)} `,
    })
    .split('\n')
    .map((line) => [...line].slice(0, axisWidth).join('').replaceAll('┼', '┤'));
  const grid: (Cell | null)[][] = axis.map(() => new Array<Cell | null>(width).fill(null));

  series.forEach((s, index) => {
    for (const segment of segments(s, xs)) {
      const [c0, c1] = [column(segment[0].x), column(segment[segment.length - 1].x)];
      const values = resample(segment, c0, c1, column, toY);
      const drawn = asciichart.plot(values.length > 1 ? values : [values[0], values[0]], {
        ...config,
        offset: 0,
        format: () => ' ',
        symbols: STYLES[index % STYLES.length],
      });
      drawn.split('\n').forEach((line, row) => {
        [...line].forEach((char, c) => {
          const at = c0 + c;
          if (char !== ' ' && at < width && grid[row]) grid[row][at] = { char, series: index };
        });
      });
    }
  });

  const paint = (cell: Cell | null) => {
    if (!cell) return ' ';
    return options.color ? pc[COLORS[cell.series % COLORS.length]](cell.char) : cell.char;
  };
  const lines = [pc.bold(pc.cyan(truncate(`${chart.title} — ${chart.yLabel}`, TERMINAL_WIDTH)))];
  for (const [i, row] of grid.entries()) lines.push(`${axis[i]}${row.map(paint).join('')}`.trimEnd());
  lines.push(...xAxis(xs, column, axisWidth, width, chart.xLabel));
  series.forEach((s, i) => {
    const style = STYLES[i % STYLES.length];
    const sample = `${style[4]}${style[4]}${style[4]}`;
    const swatch = options.color ? pc[COLORS[i % COLORS.length]](sample) : sample;
    lines.push(`  ${swatch} ${truncate(s.label, TERMINAL_WIDTH - 6)}`);
  });
  return lines.join('\n');
}

/** The runs of a series over consecutive sweep sizes: a size it lacks (not run) breaks its line. */
function segments(series: ChartSeries, xs: readonly number[]): ChartSeries['points'][] {
  const points = [...series.points].sort((a, b) => a.x - b.x);
  const runs: ChartSeries['points'][] = [];
  for (const point of points) {
    const last = runs[runs.length - 1];
    const previous = last?.[last.length - 1];
    if (previous && xs.indexOf(point.x) === xs.indexOf(previous.x) + 1) last.push(point);
    else runs.push([point]);
  }
  return runs;
}

/** The segment's y (transformed) at every column from c0 to c1, linear between its points. */
function resample(
  segment: ChartSeries['points'],
  c0: number,
  c1: number,
  column: (x: number) => number,
  toY: (y: number) => number,
): number[] {
  const values: number[] = [];
  let i = 0;
  for (let c = c0; c <= c1; c++) {
    while (i < segment.length - 2 && column(segment[i + 1].x) < c) i++;
    const [a, b] = [segment[i], segment[Math.min(i + 1, segment.length - 1)]];
    const [ca, cb] = [column(a.x), column(b.x)];
    const t = cb === ca ? 0 : (c - ca) / (cb - ca);
    values.push(toY(a.y) + (toY(b.y) - toY(a.y)) * Math.min(1, Math.max(0, t)));
  }
  return values;
}

/** The x axis line with a tick at each size, the sizes under their ticks (those that fit), and its name. */
function xAxis(
  xs: readonly number[],
  column: (x: number) => number,
  axisWidth: number,
  width: number,
  name: string,
): string[] {
  const rule = new Array<string>(width).fill('─');
  const text = new Array<string>(width + 8).fill(' ');
  let free = 0;
  for (const x of xs) {
    const c = column(x);
    rule[c] = '┬';
    const label = String(x);
    const start = Math.max(0, Math.min(width + 8 - label.length, c - Math.floor(label.length / 2)));
    if (start < free) continue; // would overlap the previous size's label
    for (let i = 0; i < label.length; i++) text[start + i] = label[i];
    free = start + label.length + 1;
  }
  const pad = ' '.repeat(axisWidth - 1);
  return [`${pad}└${rule.join('')}`, `${pad} ${text.join('').trimEnd()}`, `${pad} ${name}`.trimEnd()];
}
