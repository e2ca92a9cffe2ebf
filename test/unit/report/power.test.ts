/**
 * The GPU's power state in results and reports (rows[].timing.power, machine.gpu.powerLimitWatts, written by
 * src/bench/gpu-power.ts): the schema takes and checks them, the machine shows the limit, and a note says which
 * rows were timed at the power limit, in the terminal text and the HTML.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { makeResults } from '../../../src/bench/results.js';
import { reloadConfig } from '../../../src/config.js';
import type { NamedResults } from '../../../src/report/charts.js';
import { buildHtmlReport } from '../../../src/report/html.js';
import { CAPPED_NOTE_PERCENT, powerCapNotes } from '../../../src/report/power.js';
import { writeReport } from '../../../src/report/write.js';
import type { ResultRow } from '../../../src/results/schema.js';
import { parseResults } from '../../../src/results/validate.js';

process.env.ATTNLAB_DISABLE_CUDA = '1';
reloadConfig();

const summary = { median: 1, p10: 1, p90: 1, min: 1, max: 1, mean: 1, count: 10 };
function row(label: string, power?: { cappedPercent: number; meanWatts: number }): ResultRow {
  return {
    sweep: 'bench',
    source: 'attnlab',
    impl: 'flash',
    label,
    B: 1,
    T: 128,
    S: 128,
    N: 8,
    K: 8,
    H: 64,
    dtype: 'bfloat16',
    causal: false,
    status: 'ok',
    flops: 1e9,
    tflops: 1,
    timing: {
      method: 'cuda-events',
      ms: summary,
      firstCallMs: 5,
      warmup: 5,
      inputCopies: 1,
      ...(power && { power: { ...power, limitWatts: 700 } }),
    },
  } as ResultRow;
}
function file(name: string, rows: ResultRow[]): NamedResults {
  const results = makeResults('bench', { rows });
  results.machine.gpu = {
    name: 'NVIDIA H200',
    computeCapability: '9.0',
    memoryBytes: 1,
    powerLimitWatts: 700,
  };
  return { name, results };
}

describe('power state in results and reports', () => {
  it('round-trips through the schema, and refuses a power field of the wrong kind', () => {
    const f = file('a', [row('x', { cappedPercent: 40, meanWatts: 690 })]);
    const parsed = parseResults(JSON.parse(JSON.stringify(f.results)), 'a.json');
    assert.equal(parsed.rows[0].timing?.power?.cappedPercent, 40);
    assert.equal(parsed.machine.gpu?.powerLimitWatts, 700);
    const bad = JSON.parse(JSON.stringify(f.results));
    bad.rows[0].timing.power.meanWatts = 'hot';
    assert.throws(() => parseResults(bad, 'bad.json'), /rows\[0\]\.timing\.power\.meanWatts/);
  });
  it('notes the rows timed at the power limit, with their share of time and watts; none where none was', () => {
    const f = file('a', [
      row('capped', { cappedPercent: 82.4, meanWatts: 697 }),
      row('some', { cappedPercent: 8, meanWatts: 650 }),
      row('cool', { cappedPercent: CAPPED_NOTE_PERCENT - 1, meanWatts: 400 }),
      row('no NVML'),
    ]);
    const [note] = powerCapNotes([f]);
    assert.match(
      note,
      /700 W power limit held it below its clocks during 2 of 3 timed rows \(8–82% of their time, 650–697 W/,
    );
    assert.deepEqual(
      powerCapNotes([file('b', [row('cool', { cappedPercent: 0, meanWatts: 300 }), row('none')])]),
      [],
    );
    const text = writeReport([f]);
    assert.match(text, /power limit\s*│\s*700 W/);
    assert.match(text, /note: the GPU's 700 W power limit/);
    const html = buildHtmlReport([f]);
    assert.match(html, /power limit/);
    assert.match(html, /the GPU&#39;s 700 W power limit|the GPU's 700 W power limit/);
    assert.match(powerCapNotes([f, file('b', [])])[0], /^a: /, 'named when several files are shown');
  });
});
