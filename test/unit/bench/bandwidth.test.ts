/**
 * A decode step's bandwidth (src/bench/bandwidth.ts): which rows get it, the bytes it counts, and that the
 * terminal table, the HTML table and the charts show it where rows have it (issue 16: decode rows are GB/s).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { cacheBytes, decodeStepBytes, withDecodeBandwidth } from '../../../src/bench/bandwidth.js';
import { measureAttnlabCase } from '../../../src/bench/measure.js';
import { makeResults } from '../../../src/bench/results.js';
import { summarize } from '../../../src/bench/stats.js';
import { chartsFor } from '../../../src/report/charts.js';
import { buildHtmlReport } from '../../../src/report/html.js';
import { renderResultRows } from '../../../src/report/results-terminal.js';
import type { ResultRow } from '../../../src/results/schema.js';

/** An ok row of B=64 S=16384 N=32 K=1 H=128 bf16 timed at `ms` a call. */
const row = (over: Partial<ResultRow> = {}, ms = 0.125): ResultRow => ({
  sweep: 'decode',
  source: 'attnlab',
  impl: 'flash',
  label: 'attnlab flash bf16 decode step',
  B: 64,
  T: 1,
  S: 16384,
  N: 32,
  K: 1,
  H: 128,
  dtype: 'bfloat16',
  causal: false,
  status: 'ok',
  flops: 4 * 64 * 32 * 16384 * 128,
  timing: { method: 'cuda-events', ms: summarize([ms, ms, ms]), firstCallMs: 1, warmup: 1, inputCopies: 1 },
  ...over,
});

describe('decode bandwidth', () => {
  it('counts the K/V cache once plus Q and O: 1M tokens of K=1, H=128 bf16 is 512 MiB and 1 MiB', () => {
    const sizes = { B: 64, T: 1, S: 16384, N: 32, K: 1, H: 128, dtype: 'bfloat16' };
    assert.equal(cacheBytes(sizes), 512 * 2 ** 20);
    assert.equal(decodeStepBytes(sizes), 512 * 2 ** 20 + 2 * 64 * 32 * 128 * 2);
  });

  it('a timed T=1 forward row gets GB/s over its median, and % of the H200 HBM peak where it ran on a GPU', () => {
    const gpu = withDecodeBandwidth(row(), true);
    const bytes = 512 * 2 ** 20 + 2 * 64 * 32 * 128 * 2;
    assert.ok(Math.abs((gpu.bandwidthGBs ?? 0) - bytes / 0.125e-3 / 1e9) < 1e-9, String(gpu.bandwidthGBs));
    assert.ok(Math.abs((gpu.bandwidthPercent ?? 0) - (100 * bytes) / 0.125e-3 / 1e9 / 4800) < 1e-9);
    const cpu = withDecodeBandwidth(row(), false);
    assert.equal(cpu.bandwidthGBs, gpu.bandwidthGBs);
    assert.equal(cpu.bandwidthPercent, undefined, 'no HBM share for a CPU row');
  });

  it('leaves prefill, causal (top-left: one key seen), backward, failed and untimed rows, and unknown dtypes, as they came', () => {
    for (const other of [
      row({ T: 2 }),
      row({ causal: true }),
      row({ pass: 'backward' }),
      row({ status: 'unsupported', timing: undefined, reason: 'no' }),
      row({ dtype: 'int4' }),
    ])
      assert.deepEqual(withDecodeBandwidth(other, true), other);
  });

  it('attnlab rows measured with T=1 carry it (CPU: no HBM share), T>1 rows do not', () => {
    const quick = { budgetMs: 5, warmup: 1, minRepeats: 3, sweep: 'unit' };
    const c = {
      B: 2,
      S: 64,
      N: 4,
      K: 1,
      H: 16,
      dtype: 'float32' as const,
      causal: false,
      impl: 'flash' as const,
    };
    const step = measureAttnlabCase({ ...c, T: 1 }, quick);
    assert.equal(step.status, 'ok', step.reason);
    const bytes = 2 * 2 * 64 * 16 * 4 + 2 * 2 * 4 * 16 * 4;
    assert.ok(Math.abs((step.bandwidthGBs ?? 0) - bytes / (step.timing!.ms.median * 1e-3) / 1e9) < 1e-9);
    assert.equal(step.bandwidthPercent, undefined);
    assert.equal(measureAttnlabCase({ ...c, T: 8 }, quick).bandwidthGBs, undefined);
  });
});

describe('reports show a decode row in GB/s', () => {
  const decode = [withDecodeBandwidth(row({ K: 8 }, 0.94), true), withDecodeBandwidth(row({ K: 1 }), true)];
  const prefill = row({ sweep: 'seq', T: 4096, S: 4096, label: 'attnlab flash bf16', tflops: 500 });

  it('the terminal table: a GB/s and % HBM column where a row has them, none where no row does', () => {
    const table = renderResultRows(decode);
    assert.match(table, /GB\/s/);
    assert.match(table, /%HBM/);
    assert.ok(table.includes(String(Math.round(decode[1].bandwidthGBs ?? 0)).slice(0, 3)), table);
    assert.ok(table.includes(`${decode[1].bandwidthPercent?.toFixed(1)}%`), table);
    assert.doesNotMatch(renderResultRows([prefill]), /GB\/s/);
  });

  it('the HTML table and charts: decode groups charted in GB/s, others in TFLOP/s', () => {
    const results = makeResults('lab', { rows: [...decode, prefill] });
    const charts = chartsFor([{ name: 'lab', results }]);
    const units = charts.map((c) => `${c.id}: ${c.yLabel}`);
    assert.ok(
      units.some((u) => u.includes('-decode-') && u.endsWith('(GB/s)')),
      units.join('\n'),
    );
    assert.ok(!units.some((u) => u.includes('-decode-') && u.endsWith('(TFLOP/s)')), units.join('\n'));
    // A group of both (a bench over --seq 1,4096) gets both rates, each over its own rows.
    const mixed = makeResults('bench', {
      rows: [
        withDecodeBandwidth(row({ sweep: 'bench' }), true),
        withDecodeBandwidth(row({ sweep: 'bench', T: 4096, S: 16384, tflops: 500 }), true),
      ],
    });
    const mixedUnits = chartsFor([{ name: 'b', results: mixed }]).map((c) => c.yLabel);
    assert.deepEqual(mixedUnits.sort(), [
      'Bandwidth (GB/s)',
      'Median time per call (ms)',
      'Throughput (TFLOP/s)',
    ]);
    const html = buildHtmlReport([{ name: 'lab', results }]);
    assert.match(html, /<th[^>]*>GB\/s<\/th>/);
    assert.match(html, /<th[^>]*>% HBM<\/th>/);
  });
});
