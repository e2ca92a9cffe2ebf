/**
 * The CPU backends against hand-checked cases and against each other over the correctness matrix.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { attention, dotProductAttention } from '../../../../src/api/attention.js';
import { cpuFlashBackend } from '../../../../src/backends/cpu/flash.js';
import { buildInputs, CASES } from '../../../../src/check/cases.js';
import { PRECISIONS } from '../../../../src/check/suite.js';
import { Tensor } from '../../../../src/tensor/tensor.js';
import { defineBackendSuite } from '../../../support/backend-suite.js';

const f64 = (values: number[], shape: number[]) => Tensor.fromArray(values, shape, 'float64');

describe('hand-checked cases', () => {
  it('weights one query over two keys', () => {
    // logits [0, ln 3] → weights [1/4, 3/4]; values [4, 8] → 7; lse = ln 4.
    const q = f64([1], [1, 1, 1, 1]);
    const k = f64([0, Math.log(3)], [1, 2, 1, 1]);
    const v = f64([4, 8], [1, 2, 1, 1]);
    for (const implementation of ['reference', 'flash'] as const) {
      const r = attention(q, k, v, { scale: 1, implementation, returnLogSumExp: true });
      assert.ok(Math.abs(r.output.get(0, 0, 0, 0) - 7) < 1e-12);
      assert.ok(Math.abs(r.logSumExp!.get(0, 0, 0) - Math.log(4)) < 1e-6);
      assert.equal(r.backend, implementation);
    }
  });

  it('aligns causal masks top-left and bottom-right when T < S', () => {
    // T=2, S=3, all logits 0, v = key index: row i averages the keys it sees.
    const q = f64([0, 0], [1, 2, 1, 1]);
    const k = f64([0, 0, 0], [1, 3, 1, 1]);
    const v = f64([0, 1, 2], [1, 3, 1, 1]);
    const topLeft = dotProductAttention(q, k, v, { isCausal: true }).toFloat64Array();
    assert.deepEqual([...topLeft], [0, 0.5]); // rows see {0}, {0,1}
    const bottomRight = dotProductAttention(q, k, v, { isCausal: true, causalAlignment: 'bottom_right' });
    assert.deepEqual([...bottomRight.toFloat64Array()], [0.5, 1]); // rows see {0,1}, {0,1,2}
  });

  it('gives an empty row zeros and log-sum-exp −inf', () => {
    // T=3 > S=1 bottom-right: rows 0 and 1 see nothing, row 2 sees key 0.
    const q = f64([1, 1, 1], [1, 3, 1, 1]);
    const k = f64([1], [1, 1, 1, 1]);
    const v = f64([5], [1, 1, 1, 1]);
    for (const implementation of ['reference', 'flash'] as const) {
      const r = attention(q, k, v, {
        isCausal: true,
        causalAlignment: 'bottom_right',
        implementation,
        returnLogSumExp: true,
      });
      assert.deepEqual([...r.output.toFloat64Array()], [0, 0, 5]);
      assert.deepEqual([...r.logSumExp!.toFloat64Array()], [-Infinity, -Infinity, 1]);
    }
  });

  it('zeros rows past querySeqLengths and ignores keys past keyValueSeqLengths', () => {
    const q = f64([0, 0, 0], [1, 3, 1, 1]);
    const k = f64([0, 0, 0], [1, 3, 1, 1]);
    const v = f64([1, 2, 100], [1, 3, 1, 1]);
    const out = dotProductAttention(q, k, v, { querySeqLengths: [2], keyValueSeqLengths: [2] });
    assert.deepEqual([...out.toFloat64Array()], [1.5, 1.5, 0]);
  });

  it('shares one K/V head among a GQA group', () => {
    // N=2 query heads, K=1: both heads read the same single key/value head.
    const q = f64([0, 5], [1, 1, 2, 1]);
    const k = f64([1, 2], [1, 2, 1, 1]);
    const v = f64([10, 20], [1, 2, 1, 1]);
    const out = dotProductAttention(q, k, v, { scale: 1 }).toFloat64Array();
    assert.equal(out[0], 15); // equal logits → mean
    const w = 1 / (1 + Math.exp(-5)); // logits 5 and 10: weight of the second key
    assert.ok(Math.abs(out[1] - (10 * (1 - w) + 20 * w)) < 1e-12);
  });

  it('applies bias after scaling and a window around the diagonal', () => {
    const q = f64([1], [1, 1, 1, 1]);
    const k = f64([1, 1], [1, 2, 1, 1]);
    const v = f64([0, 1], [1, 2, 1, 1]);
    const bias = f64([0, Math.log(3)], [1, 1, 1, 2]);
    const out = dotProductAttention(q, k, v, { bias, scale: 2 }).toFloat64Array();
    assert.ok(Math.abs(out[0] - 0.75) < 1e-12);
    const q3 = f64([0, 0, 0], [1, 3, 1, 1]);
    const k3 = f64([0, 0, 0], [1, 3, 1, 1]);
    const v3 = f64([0, 3, 6], [1, 3, 1, 1]);
    const win = dotProductAttention(q3, k3, v3, { localWindowSize: [1, 0] }).toFloat64Array();
    assert.deepEqual([...win], [0, 1.5, 4.5]);
  });

  it('accepts unbatched (T,N,H) inputs and returns (T,N,Hv)', () => {
    const q = f64([1, 2, 3, 4], [2, 1, 2]);
    const k = f64([1, 0, 0, 1], [2, 1, 2]);
    const v = f64([1, 2], [2, 1, 1]);
    const r = attention(q, k, v, { returnLogSumExp: true });
    assert.deepEqual(r.output.shape, [2, 1, 1]);
    assert.deepEqual(r.logSumExp!.shape, [2, 1]);
    const batched = dotProductAttention(
      q.reshape([1, 2, 1, 2]),
      k.reshape([1, 2, 1, 2]),
      v.reshape([1, 2, 1, 1]),
    );
    assert.deepEqual([...r.output.toFloat64Array()], [...batched.toFloat64Array()]);
  });
});

// The correctness matrix in float64: the suite's runner (as test/gpu/* use it), so the tiled CPU
// flash must match the float64 reference to ~1e-12, output and log-sum-exp. Other precisions and the
// random cases: suite.test.ts.
describe('correctness matrix in float64: CPU flash against the reference', () => {
  defineBackendSuite(cpuFlashBackend, { cases: CASES, precisions: [PRECISIONS.float64] });
});

describe('CPU flash', () => {
  it('runs the codelab default shape (B=4,T=128,N=8,H=64) with flash in well under a second', () => {
    const { q, k, v } = buildInputs(
      { name: 'default', shape: { B: 4, T: 128, S: 128, N: 8, K: 8, H: 64 } },
      'float32',
      5,
    );
    const start = performance.now();
    attention(q, k, v, { implementation: 'flash' });
    const ms = performance.now() - start;
    assert.ok(ms < 1000, `took ${ms.toFixed(0)} ms`);
  });
});
