/** Measuring one case on the CPU, and the float64 row oracle behind the error column. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { attention } from '../../../src/api/attention.js';
import { attentionFlops } from '../../../src/backends/problem.js';
import { checkPlan, maxErrorAgainstOracle, type RawTensor, spread } from '../../../src/bench/accuracy.js';
import {
  MAX_SETTLE_CALLS,
  measureAttnlabCase,
  RANDOM_BLOCK_ELEMENTS,
  seededInput,
  settleCalls,
} from '../../../src/bench/measure.js';
import { reloadConfig } from '../../../src/config.js';
import { randomNormal } from '../../../src/tensor/random.js';
import { Tensor } from '../../../src/tensor/tensor.js';

process.env.ATTNLAB_DISABLE_CUDA = '1';
reloadConfig();

const quick = { budgetMs: 5, warmup: 1, minRepeats: 3 };

describe('row oracle', () => {
  const [B, T, S, N, K, H] = [2, 5, 7, 4, 2, 8];
  const q = randomNormal([B, T, N, H], { seed: 1, dtype: 'float64' });
  const k = randomNormal([B, S, K, H], { seed: 2, dtype: 'float64' });
  const v = randomNormal([B, S, K, H], { seed: 3, dtype: 'float64' });
  const shape = { B, T, S, N, K, H, causal: true, scale: 1 / Math.sqrt(H) };
  const raw = (t: Tensor): RawTensor => ({ data: t.data, dtype: t.dtype });
  const values = [q, k, v].map(raw);

  it('agrees with the float64 reference backend (GQA, causal top-left, T ≠ S)', () => {
    const expected = raw(attention(q, k, v, { isCausal: true, implementation: 'reference' }).output);
    const check = maxErrorAgainstOracle(shape, values[0], values[1], values[2], expected);
    assert.ok(check.full);
    assert.ok(check.maxError < 1e-12, `max error ${check.maxError}`);
  });

  it('reports a wrong output element by exactly how wrong it is, and NaN as NaN', () => {
    const out = attention(q, k, v, { isCausal: true, implementation: 'reference' }).output.toFloat64Array();
    const f64 = (data: Float64Array): RawTensor => ({ data, dtype: 'float64' });
    out[(1 * T + 3) * N * H + 2 * H + 5] += 0.25;
    const check = maxErrorAgainstOracle(shape, values[0], values[1], values[2], f64(out));
    assert.ok(Math.abs(check.maxError - 0.25) < 1e-12, String(check.maxError));
    out[0] = Number.NaN;
    assert.ok(Number.isNaN(maxErrorAgainstOracle(shape, values[0], values[1], values[2], f64(out)).maxError));
  });

  it('checks everything of small problems, and 4 rows of 8 (b, n) pairs of large ones', () => {
    const small = checkPlan(shape);
    assert.equal(small.full, true);
    assert.equal(small.pairs.length, B * N);
    assert.deepEqual(small.rows, [0, 1, 2, 3, 4]);
    const large = checkPlan({ B: 4, T: 16384, S: 16384, N: 8, K: 8, H: 64, causal: false, scale: 1 });
    assert.equal(large.full, false);
    assert.deepEqual(large.rows, [0, 5461, 10922, 16383]);
    assert.deepEqual(large.pairs, [
      [0, 0],
      [0, 4],
      [1, 1],
      [1, 5],
      [2, 2],
      [2, 6],
      [3, 3],
      [3, 7],
    ]);
    assert.deepEqual(spread(3, 8), [0, 1, 2]);
  });

  it('a sampled check still catches a wrong value in a checked row', () => {
    const big = { B: 2, T: 64, S: 1024, N: 8, K: 2, H: 32, causal: false, scale: 1 / Math.sqrt(32) };
    const plan = checkPlan(big);
    assert.equal(plan.full, false);
    const [qs, ks, vs] = [
      [64, 8],
      [1024, 2],
      [1024, 2],
    ].map(([len, heads], i) => randomNormal([2, len, heads, 32], { seed: 10 + i, dtype: 'float32' }));
    const out = attention(qs, ks, vs, { implementation: 'reference' }).output;
    const good = maxErrorAgainstOracle(big, raw(qs), raw(ks), raw(vs), raw(out));
    assert.ok(good.maxError < 1e-6, String(good.maxError));
    const [b, n] = plan.pairs[3];
    const t = plan.rows[2];
    (out.data as Float32Array)[((b * 64 + t) * 8 + n) * 32 + 7] += 0.5;
    const bad = maxErrorAgainstOracle(big, raw(qs), raw(ks), raw(vs), raw(out));
    assert.ok(Math.abs(bad.maxError - 0.5) < 1e-6, String(bad.maxError));
  });
});

describe('measureAttnlabCase on the CPU', () => {
  const c = { B: 1, T: 32, S: 32, N: 4, K: 2, H: 16, dtype: 'float32' as const, causal: false };

  it('times with performance.now(), checks the output and derives TFLOP/s from the median', () => {
    const row = measureAttnlabCase({ ...c, impl: 'flash' }, { ...quick, sweep: 'unit' });
    assert.equal(row.status, 'ok', row.reason);
    assert.equal(row.sweep, 'unit');
    assert.equal(row.label, 'attnlab flash f32');
    assert.equal(row.timing?.method, 'performance-now');
    assert.equal(row.timing?.inputCopies, 1);
    assert.ok((row.timing?.ms.count ?? 0) >= 3);
    assert.equal(row.errorCheck, 'full');
    assert.ok(
      row.maxError !== undefined && row.maxError !== null && row.maxError < 1e-6,
      String(row.maxError),
    );
    assert.equal(row.flops, attentionFlops({ B: c.B, T: c.T, S: c.S, N: c.N, H: c.H, causal: c.causal }));
    assert.ok(Math.abs((row.tflops ?? 0) - row.flops / (row.timing!.ms.median * 1e-3) / 1e12) < 1e-15);
    assert.match(row.variant ?? '', /cpu-flash/);
  });

  it('a custom call is timed and checked the same way, so a wrong result shows in max err', () => {
    const zeros = (q: Tensor) => ({ output: Tensor.zeros(q.shape, 'float32'), variant: 'zeros' });
    const row = measureAttnlabCase(
      { ...c, impl: 'flash' },
      { ...quick, impl: 'zeros', label: 'all zeros', call: zeros },
    );
    assert.equal(row.impl, 'zeros');
    assert.equal(row.label, 'all zeros');
    assert.equal(row.variant, 'zeros');
    assert.ok((row.maxError ?? 0) > 0.05, `a zero output must be far from attention, got ${row.maxError}`);
  });

  it('a GPU backend without CUDA becomes an unsupported row that says why', () => {
    const row = measureAttnlabCase({ ...c, impl: 'naive' }, quick);
    assert.equal(row.status, 'unsupported');
    assert.match(row.reason ?? '', /naive/);
    assert.match(row.reason ?? '', /no CUDA here: ATTNLAB_DISABLE_CUDA=1/);
    assert.equal(row.timing, undefined);
  });
});

describe('measureAttnlabCase with a broken output', () => {
  it('a NaN output keeps a null error and says so (JSON has no NaN)', () => {
    const c = {
      B: 1,
      T: 8,
      S: 8,
      N: 2,
      K: 2,
      H: 8,
      dtype: 'float32' as const,
      causal: false,
      impl: 'flash' as const,
    };
    const nan = (q: Tensor) => ({
      output: Tensor.fromArray(new Float64Array(q.size).fill(Number.NaN), q.shape),
      variant: 'nan',
    });
    const row = measureAttnlabCase(c, { budgetMs: 1, warmup: 0, minRepeats: 1, call: nan });
    assert.equal(row.status, 'ok');
    assert.equal(row.maxError, null);
    assert.equal(row.reason, 'the output holds NaN');
  });
});

describe('seededInput', () => {
  it('is randomNormal up to RANDOM_BLOCK_ELEMENTS, and a tiled seeded block beyond', () => {
    const small = seededInput([1, 4, 2, 8], 5, 'bfloat16');
    assert.deepEqual(
      small.toFloat64Array(),
      randomNormal([1, 4, 2, 8], { seed: 5, dtype: 'bfloat16' }).toFloat64Array(),
    );
    const [heads, H] = [4, 64];
    const rows = RANDOM_BLOCK_ELEMENTS / (heads * H);
    const large = seededInput([2, rows * 3 + 5, heads, H], 5, 'bfloat16');
    assert.deepEqual(large.shape, [2, rows * 3 + 5, heads, H]);
    const values = large.toFloat64Array();
    const block = randomNormal([1, rows, heads, H], { seed: 5, dtype: 'bfloat16' }).toFloat64Array();
    assert.deepEqual(values.subarray(0, block.length), block);
    assert.deepEqual(values.subarray(block.length, 2 * block.length), block);
    assert.equal(values[values.length - 1], block[(values.length - 1) % block.length]);
  });
});

it('the settle phase lasts settleMs of calls, capped for short calls, none when turned off', () => {
  assert.equal(settleCalls(300, 3.6), 84);
  assert.equal(settleCalls(300, 200), 2);
  assert.equal(settleCalls(300, 0.01), MAX_SETTLE_CALLS);
  assert.equal(settleCalls(0, 3.6), 0);
});
