/** Terminal output: tables and bars within 100 columns, colour only when asked for. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  fitWidths,
  renderBars,
  renderTable,
  TERMINAL_WIDTH,
  wrapText,
} from '../../../src/report/terminal.js';

// biome-ignore lint/suspicious/noControlCharactersInRegex: matching ANSI escape codes is the point.
const ANSI = /\u001b\[/;
const widest = (text: string) => Math.max(...text.split('\n').map((l) => [...l].length));

describe('terminal tables', () => {
  it('fit 100 columns by wrapping text columns, never numbers', () => {
    const long = 'a label long enough that nine columns of it could never fit side by side';
    const rows = [
      [long, long, '12345.678', '0.001234'],
      ['short', long, '1', '2'],
    ];
    const text = renderTable(['series', 'detail', 'ms', 'TFLOP/s'], rows, {
      align: ['left', 'left', 'right', 'right'],
    });
    assert.ok(widest(text) <= TERMINAL_WIDTH, `widest line ${widest(text)}`);
    assert.match(text, /12345\.678/, 'a number stays on one line');
    assert.doesNotMatch(text, ANSI);
  });

  it('keep natural widths when they fit', () => {
    assert.deepEqual(fitWidths([10, 20, 30], 80), [10, 20, 30]);
    const fitted = fitWidths([50, 50, 10], 80, [true, true, false]);
    assert.equal(
      fitted.reduce((a, b) => a + b, 0),
      80,
    );
    assert.equal(fitted[2], 10, 'the numeric column keeps its width');
  });

  it('colour the header only when colour is on', () => {
    assert.match(renderTable(['h'], [['x']], { color: true, title: 'T' }), ANSI);
    assert.doesNotMatch(renderTable(['h'], [['x']], { color: false, title: 'T' }), ANSI);
  });
});

describe('terminal bars', () => {
  it('scale to the largest value within 100 columns, with the value and a direction hint', () => {
    const items = [
      { label: 'attnlab naive f32', value: 0.5 },
      { label: 'a very long series label that has to be cut somewhere', value: 2 },
      { label: 'tiny', value: 0.001 },
    ];
    const text = renderBars(items, { title: 'Latency', unit: 'ms', lowerIsBetter: true });
    const lines = text.split('\n');
    assert.ok(widest(text) <= TERMINAL_WIDTH, `widest line ${widest(text)}`);
    assert.equal(lines.length, 1 + items.length + 1);
    const bar = (line: string) => (line.match(/[█▏▎▍▌▋▊▉]/g) ?? []).length;
    const full = [...lines[2]].filter((ch) => ch === '█').length;
    const quarter = [...lines[1]].filter((ch) => ch === '█').length;
    assert.ok(Math.abs(quarter / full - 0.25) < 0.03, `0.5 of 2 should be a quarter bar: ${quarter}/${full}`);
    assert.ok(bar(lines[3]) >= 1, 'the smallest value still shows a sliver');
    assert.match(lines[1], /0\.500 ms$/);
    assert.match(lines[2], /…/);
    assert.equal(lines.at(-1), 'Lower is better.');
  });
});

describe('wrapText', () => {
  it('breaks prose between words within the width, indents what follows, keeps long words whole', () => {
    const text = `note: ${'word '.repeat(40)}/a/path/${'x'.repeat(120)} end`;
    const lines = wrapText(text, 50, '      ').split('\n');
    assert.ok(lines.length > 4);
    assert.ok(lines[0].startsWith('note: word'));
    for (const line of lines.slice(1)) assert.ok(line.startsWith('      '), line);
    for (const line of lines.filter((l) => !l.includes('/a/path/'))) assert.ok(line.length <= 50, line);
    assert.equal(lines.join(' ').replace(/ +/g, ' '), text.replace(/ +/g, ' '));
    assert.equal(wrapText('short\nkept'), 'short\nkept');
  });
});
