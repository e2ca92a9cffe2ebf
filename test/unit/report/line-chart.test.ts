/** Sweeps as terminal line charts (asciichart): within 100 columns, the lines where the data says. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { ChartSpec } from '../../../src/report/charts.js';
import { renderLineChart } from '../../../src/report/line-chart.js';
import { renderChartText } from '../../../src/report/results-terminal.js';
import { TERMINAL_WIDTH } from '../../../src/report/terminal.js';

// biome-ignore lint/suspicious/noControlCharactersInRegex: matching ANSI escape codes is the point.
const ANSI = /\u001b\[/;
const widest = (text: string) => Math.max(...text.split('\n').map((l) => [...l].length));

function chart(series: ChartSpec['series'], extra: Partial<ChartSpec> = {}): ChartSpec {
  return {
    id: 'c',
    sweep: 'seq',
    kind: 'line',
    title: 'Sequence length sweep: median time per call vs query length T (B=1 N=4 H=32)',
    xLabel: 'query length T',
    yLabel: 'Median time per call (ms)',
    logX: true,
    logY: false,
    series,
    ...extra,
  };
}

/** The plot rows (between the title and the x axis), split into the y labels and the plot area. */
function plotRows(text: string): { label: string; area: string[] }[] {
  const lines = text.split('\n');
  const end = lines.findIndex((l) => l.includes('└'));
  return lines.slice(1, end).map((line) => {
    const at = line.indexOf('┤');
    return { label: line.slice(0, at).trim(), area: [...line.slice(at + 1)] };
  });
}

const LIGHT = /[─╭╮╰╯│]/;
const HEAVY = /[━┏┓┗┛┃]/;

describe('terminal line charts', () => {
  it('draw a rising series from the bottom-left to the top-right, with the sizes on the x axis', () => {
    const xs = [16, 32, 64, 128, 256];
    const text = renderLineChart(chart([{ label: 'flash', points: xs.map((x) => ({ x, y: x / 16 })) }]));
    const rows = plotRows(text);
    const firstRow = rows.findIndex((r) => r.area.some((c) => c !== ' '));
    const drawn = rows.map((r, i) => (r.area.some((c) => c !== ' ') ? i : -1));
    const lastRow = Math.max(...drawn);
    const columnsIn = (r: { area: string[] }) =>
      r.area.map((c, i) => (c === ' ' ? -1 : i)).filter((i) => i >= 0);
    // The top row holds the right end of the line, the bottom row its left end.
    assert.ok(Math.min(...columnsIn(rows[firstRow])) > 60, 'top row drawn on the right');
    assert.equal(Math.min(...columnsIn(rows[lastRow])), 0, 'bottom row starts at the axis');
    assert.ok(Math.max(...columnsIn(rows[lastRow])) < 30, 'bottom row drawn on the left');
    assert.equal(Number(rows[0].label), 16, 'the top label is the largest value');
    assert.equal(Number(rows.at(-1)?.label), 1, 'the bottom label is the smallest');
    const sizes = text.split('\n').find((l) => /\b16\b.*\b256\b/.test(l)) ?? '';
    for (const x of xs) assert.match(sizes, new RegExp(`\\b${x}\\b`));
    assert.match(text, /^ +query length T$/m);
    assert.match(text, /^ {2}─── flash$/m, 'legend line with the line style');
  });

  it('tells series apart by line style without colour, and by colour on a TTY', () => {
    const points = (k: number) => [16, 32, 64].map((x) => ({ x, y: k * x }));
    const spec = chart([
      { label: 'attnlab naive f32', points: points(1) },
      { label: 'attnlab flash f32', points: points(3) },
    ]);
    const plain = renderLineChart(spec);
    assert.doesNotMatch(plain, ANSI);
    const rows = plotRows(plain);
    // flash (3×) is above naive: its heavy line reaches rows that the light one does not.
    const topHeavy = rows.findIndex((r) => r.area.some((c) => HEAVY.test(c)));
    const topLight = rows.findIndex((r) => r.area.some((c) => LIGHT.test(c)));
    assert.ok(topHeavy >= 0 && topLight >= 0 && topHeavy < topLight);
    assert.match(plain, /━━━ attnlab flash f32/);
    assert.match(renderLineChart(spec, { color: true }), ANSI);
  });

  it('break a series where it lacks a size, instead of drawing through it', () => {
    const xs = [16, 32, 64, 128, 256];
    const full = { label: 'full', points: xs.map((x) => ({ x, y: 1 })) };
    const gappy = { label: 'gap', points: [16, 32, 256].map((x) => ({ x, y: 2 })) };
    const rows = plotRows(renderLineChart(chart([full, gappy])));
    const heavyColumns = rows.flatMap((r) => r.area.map((c, i) => (HEAVY.test(c) ? i : -1)));
    const width = rows[0].area.length;
    // 32 sits at a quarter of the log2 axis, 256 at its end: nothing heavy in between.
    const between = heavyColumns.filter((i) => i > width * 0.3 && i < width * 0.9);
    assert.deepEqual(between, []);
    assert.ok(
      heavyColumns.some((i) => i >= 0 && i < width * 0.3),
      'the first run is drawn',
    );
  });

  it('fit 100 columns with many series and long labels; renderChartText draws sweeps this way', () => {
    const series = Array.from({ length: 24 }, (_, i) => ({
      label: `series ${i} with a label long enough to need cutting at the edge of the terminal window ok`,
      points: [16, 32, 64, 128].map((x) => ({ x, y: (i + 1) * x * 1.2345e-5 })),
    }));
    const text = renderChartText(chart(series, { logY: true }));
    assert.ok(widest(text) <= TERMINAL_WIDTH, `widest line ${widest(text)}`);
    for (let i = 0; i < 24; i++) assert.match(text, new RegExp(`series ${i} with`));
    assert.doesNotMatch(text, /┌/, 'no pivot table of letters any more');
  });

  it('draw a flat series and a one-point series without failing', () => {
    const text = renderLineChart(
      chart([
        { label: 'flat', points: [16, 32].map((x) => ({ x, y: 5 })) },
        { label: 'dot', points: [{ x: 64, y: 5 }] },
      ]),
    );
    assert.match(text, /─/);
    assert.match(text, /━/);
  });
});
