/**
 * The backward API on the CPU: the reference's gradients against central finite differences on small
 * float64 cases (every option), the pullback's contract, GQA sums, empty and padded rows, NaN, and the
 * validation of the residuals.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { attention } from '../../../src/api/attention.js';
import { attentionBackward, attentionVjp } from '../../../src/api/backward.js';
import { validateBackward } from '../../../src/api/validate-backward.js';
import { supports } from '../../../src/backends/backend.js';
import type { BackwardOptions } from '../../../src/backends/backward-problem.js';
import { cudnnBackward } from '../../../src/backends/cuda/cudnn/backward.js';
import { InvalidArgumentError, UnsupportedError } from '../../../src/errors.js';
import { Random, randomNormal } from '../../../src/tensor/random.js';
import { Tensor } from '../../../src/tensor/tensor.js';

const normal = (shape: number[], seed: number) => randomNormal(shape, { seed, dtype: 'float64' });

/** Σ dO ∘ attention(q, k, v): its gradient is the pullback of dO. */
function loss(q: Tensor, k: Tensor, v: Tensor, dO: Float64Array, options: BackwardOptions): number {
  const { deterministic: _, ...forward } = options;
  const out = attention(q, k, v, { ...forward, implementation: 'reference' }).output.toFloat64Array();
  return out.reduce((sum, x, i) => sum + x * dO[i], 0);
}

/** Central differences of `loss` with respect to every element of `which`. */
function finiteDifferences(
  inputs: { q: Tensor; k: Tensor; v: Tensor; bias?: Tensor },
  which: 'q' | 'k' | 'v' | 'bias',
  dO: Float64Array,
  options: BackwardOptions,
): Float64Array {
  const base = (inputs[which] as Tensor).toFloat64Array();
  const grad = new Float64Array(base.length);
  const eps = 1e-5;
  const at = (values: Float64Array) => {
    const t = Tensor.fromArray(values, (inputs[which] as Tensor).shape, 'float64');
    const x = { ...inputs, [which]: t };
    return loss(x.q, x.k, x.v, dO, { ...options, bias: x.bias });
  };
  for (let e = 0; e < base.length; e++) {
    const plus = base.slice();
    const minus = base.slice();
    plus[e] += eps;
    minus[e] -= eps;
    grad[e] = (at(plus) - at(minus)) / (2 * eps);
  }
  return grad;
}

/** shape: [B, T, N, K, S, H, Hv]. */
const FD_CASES: Array<{
  name: string;
  shape: number[];
  options?: BackwardOptions;
  bias?: number[];
  mask?: number[];
}> = [
  { name: 'MHA', shape: [1, 3, 2, 2, 4, 3, 2] },
  { name: 'GQA N=4 K=2, Hv ≠ H', shape: [2, 3, 4, 2, 5, 3, 4] },
  {
    name: 'MQA causal bottom-right T>S',
    shape: [1, 5, 2, 1, 3, 2, 2],
    options: { isCausal: true, causalAlignment: 'bottom_right' },
  },
  { name: 'bias (1,N,T,S)', shape: [2, 3, 2, 2, 4, 2, 2], bias: [1, 2, 3, 4] },
  {
    name: 'bias (B,1,1,S) + causal',
    shape: [2, 4, 2, 1, 4, 2, 2],
    bias: [2, 1, 1, 4],
    options: { isCausal: true },
  },
  {
    name: 'mask + padding',
    shape: [2, 4, 2, 2, 5, 2, 2],
    mask: [2, 1, 4, 5],
    options: { querySeqLengths: [4, 2], keyValueSeqLengths: [5, 3] },
  },
  {
    name: 'window [1,1] + scale',
    shape: [1, 5, 2, 2, 5, 3, 3],
    options: { localWindowSize: [1, 1], scale: 0.7 },
  },
];

describe('reference backward against finite differences (float64)', () => {
  for (const c of FD_CASES) {
    it(c.name, () => {
      const [B, T, N, K, S, H, Hv] = c.shape;
      const q = normal([B, T, N, H], 1);
      const k = normal([B, S, K, H], 2);
      const v = normal([B, S, K, Hv], 3);
      const options: BackwardOptions = { ...c.options };
      if (c.bias) options.bias = normal(c.bias, 4);
      if (c.mask) {
        const rng = new Random(5);
        const bits = new Uint8Array(c.mask.reduce((a, b) => a * b, 1)).map(() =>
          rng.nextFloat() < 0.3 ? 0 : 1,
        );
        options.mask = Tensor.fromRaw(bits, c.mask, 'bool');
      }
      const dO = normal([B, T, N, Hv], 6);
      const f = attentionVjp(q, k, v, { ...options, implementation: 'reference' });
      const g = f.backward(dO);
      const d = dO.toFloat64Array();
      const inputs = { q, k, v, bias: options.bias };
      const pairs: Array<['q' | 'k' | 'v' | 'bias', Tensor | undefined]> = [
        ['q', g.dQuery],
        ['k', g.dKey],
        ['v', g.dValue],
        ['bias', g.dBias],
      ];
      for (const [which, grad] of pairs) {
        if (which === 'bias' && !options.bias) {
          assert.equal(grad, undefined);
          continue;
        }
        assert.ok(grad, `d${which} present`);
        assert.deepEqual(grad.shape, (inputs[which] as Tensor).shape);
        const fd = finiteDifferences(inputs, which, d, options);
        const got = grad.toFloat64Array();
        for (let e = 0; e < fd.length; e++) {
          assert.ok(
            Math.abs(got[e] - fd[e]) < 1e-7 * Math.max(1, Math.abs(fd[e])),
            `d${which}[${e}]: ${got[e]} vs finite difference ${fd[e]}`,
          );
        }
      }
    });
  }
});

describe('the pullback', () => {
  const q = normal([2, 6, 4, 8], 11);
  const k = normal([2, 7, 2, 8], 12);
  const v = normal([2, 7, 2, 5], 13);
  const dO = normal([2, 6, 4, 5], 14);

  it('keeps its residuals: backward twice gives the same gradients, and matches attentionBackward', () => {
    const f = attentionVjp(q, k, v, { isCausal: true });
    assert.equal(f.backend, 'flash');
    const a = f.backward(dO);
    const b = f.backward(dO);
    assert.deepEqual([...a.dQuery.toFloat64Array()], [...b.dQuery.toFloat64Array()]);
    assert.equal(a.backend, 'flash');
    const r = attention(q, k, v, { isCausal: true, returnLogSumExp: true });
    const explicit = attentionBackward(q, k, v, r.output, r.logSumExp!, dO, {
      isCausal: true,
      implementation: 'reference',
    });
    assert.equal(explicit.backend, 'reference');
    for (const name of ['dQuery', 'dKey', 'dValue'] as const) {
      const x = a[name].toFloat64Array();
      const y = explicit[name].toFloat64Array();
      // float64 throughout; the explicit call's float32 log-sum-exp is only used by flash, not the reference
      for (let e = 0; e < x.length; e++) assert.ok(Math.abs(x[e] - y[e]) < 1e-12, `${name}[${e}]`);
    }
  });

  it('pulls back the forward it ran, whatever happens to the options object afterwards', () => {
    const options: BackwardOptions = { isCausal: true, keyValueSeqLengths: [7, 3] };
    const lengths = options.keyValueSeqLengths as number[];
    const f = attentionVjp(q, k, v, options);
    const before = [...f.backward(dO).dQuery.toFloat64Array()];
    options.isCausal = false; // a caller reusing its options object for the next call
    lengths[1] = 7;
    assert.deepEqual([...f.backward(dO).dQuery.toFloat64Array()], before);
  });

  it('sums dKey and dValue over each KV head group (GQA equals MHA on repeated K, V)', () => {
    const repeat = (t: Tensor) => {
      const [B, S, K, D] = t.shape;
      const src = t.toFloat64Array();
      const out = new Float64Array(B * S * K * 2 * D);
      for (let x = 0; x < B * S; x++)
        for (let n = 0; n < 2 * K; n++)
          for (let h = 0; h < D; h++) out[(x * 2 * K + n) * D + h] = src[(x * K + Math.floor(n / 2)) * D + h];
      return Tensor.fromArray(out, [B, S, 2 * K, D], 'float64');
    };
    const gqa = attentionVjp(q, k, v).backward(dO);
    const mha = attentionVjp(q, repeat(k), repeat(v)).backward(dO);
    const m = mha.dKey.toFloat64Array();
    const g = gqa.dKey.toFloat64Array();
    for (let x = 0; x < g.length / 8; x++) {
      const kv = x % 2;
      const bs = Math.floor(x / 2);
      for (let h = 0; h < 8; h++) {
        const sum = m[(bs * 4 + 2 * kv) * 8 + h] + m[(bs * 4 + 2 * kv + 1) * 8 + h];
        assert.ok(Math.abs(g[x * 8 + h] - sum) < 1e-12);
      }
    }
  });

  it('gives rows that see nothing and padded rows zero gradients, and keys they hide none', () => {
    for (const implementation of ['reference', 'flash'] as const) {
      const options: BackwardOptions = {
        isCausal: true,
        causalAlignment: 'bottom_right',
        querySeqLengths: [6, 4],
        implementation,
      };
      // T=6 > S=7? no: S=7 ≥ T, so use window to empty rows: left 0, right 0 with T>S in batch 1.
      const g = attentionVjp(q, k, v, { ...options, keyValueSeqLengths: [7, 2] }).backward(dO);
      const dq = g.dQuery.toFloat64Array();
      // batch 1: Tb=4, Sb=2, bottom-right: rows 0,1 see nothing, rows 4,5 are padding.
      for (const i of [0, 1, 4, 5])
        for (let x = 0; x < 4 * 8; x++)
          assert.equal(dq[(1 * 6 + i) * 4 * 8 + x], 0, `${implementation} dQ row ${i}`);
      const dk = g.dKey.toFloat64Array();
      for (let j = 2; j < 7; j++)
        for (let x = 0; x < 2 * 8; x++) assert.equal(dk[(1 * 7 + j) * 2 * 8 + x], 0);
      assert.ok(dq.some((x) => x !== 0));
    }
  });

  it('propagates NaN as the forward does: a NaN value reaches exactly the rows that see it', () => {
    const bad = v.toFloat64Array();
    bad[((0 * 7 + 5) * 2 + 0) * 5 + 1] = Number.NaN; // b=0, key 5, KV head 0
    const vn = Tensor.fromArray(bad, v.shape, 'float64');
    for (const implementation of ['reference', 'flash'] as const) {
      const f = attentionVjp(q, k, vn, { isCausal: true, implementation });
      const out = f.output.toFloat64Array();
      const dq = f.backward(dO).dQuery.toFloat64Array();
      for (let row = 0; row < 2 * 6 * 4; row++) {
        const forwardNaN = out.slice(row * 5, row * 5 + 5).some(Number.isNaN);
        const backwardNaN = dq.slice(row * 8, row * 8 + 8).some(Number.isNaN);
        assert.equal(backwardNaN, forwardNaN, `${implementation} row ${row}`);
      }
      assert.ok(out.some(Number.isNaN) && !out.every(Number.isNaN));
    }
  });

  it('returns unbatched gradients for unbatched inputs, in the inputs dtype', () => {
    const q3 = randomNormal([5, 2, 4], { seed: 1, dtype: 'bfloat16' });
    const k3 = randomNormal([6, 1, 4], { seed: 2, dtype: 'bfloat16' });
    const v3 = randomNormal([6, 1, 3], { seed: 3, dtype: 'bfloat16' });
    const bias = randomNormal([2, 5, 1], { seed: 4, dtype: 'float32' });
    const f = attentionVjp(q3, k3, v3, { bias });
    assert.deepEqual(f.output.shape, [5, 2, 3]);
    assert.deepEqual(f.logSumExp.shape, [5, 2]);
    const g = f.backward(randomNormal([5, 2, 3], { seed: 5, dtype: 'bfloat16' }));
    assert.deepEqual(g.dQuery.shape, [5, 2, 4]);
    assert.deepEqual(g.dKey.shape, [6, 1, 4]);
    assert.deepEqual(g.dValue.shape, [6, 1, 3]);
    assert.deepEqual(g.dBias?.shape, [2, 5, 1]);
    assert.equal(g.dQuery.dtype, 'bfloat16');
    assert.equal(g.dBias?.dtype, 'float32');
  });
});

describe('backward validation', () => {
  const q = normal([1, 4, 2, 8], 1);
  const k = normal([1, 5, 2, 8], 2);
  const v = normal([1, 5, 2, 6], 3);
  const r = attention(q, k, v, { returnLogSumExp: true });
  const dO = normal([1, 4, 2, 6], 4);
  const expectError = (fn: () => unknown, argument: string, text: RegExp) =>
    assert.throws(
      fn,
      (e: unknown) => e instanceof InvalidArgumentError && e.argument === argument && text.test(e.message),
    );

  it('names dOutput, output and logSumExp with the expected shape, dtype and device', () => {
    const lse = r.logSumExp!;
    expectError(
      () => attentionBackward(q, k, v, r.output, lse, normal([1, 4, 2, 8], 5)),
      'dOutput',
      /\(B,T,N,Hv\) = \[1, 4, 2, 6\], got \[1, 4, 2, 8\]/,
    );
    expectError(
      () => attentionBackward(q, k, v, r.output, lse, dO.astype('float32')),
      'dOutput.dtype',
      /float64, got float32/,
    );
    expectError(() => attentionBackward(q, k, v, lse, lse, dO), 'output', /shape/);
    expectError(
      () => attentionBackward(q, k, v, r.output, lse.astype('bfloat16'), dO),
      'logSumExp.dtype',
      /float32 or float64/,
    );
    expectError(
      () => attentionBackward(q, k, v, r.output, null as never, dO),
      'logSumExp',
      /a Tensor, got null/,
    );
    expectError(
      () => attentionBackward(q, k, v, r.output, lse, dO, { deterministic: 1 as never }),
      'deterministic',
      /a boolean/,
    );
    expectError(() => attentionVjp(q, k, v, { deterministic: 'yes' as never }), 'deterministic', /a boolean/);
    // What came, with its type: the string 'true' read "got true".
    expectError(
      () => attentionVjp(q, k, v, { deterministic: 'true' as never }),
      'deterministic',
      /got the string 'true'$/,
    );
    // Checked as given, though the pullback's forward always returns it (it was dropped unchecked).
    expectError(
      () => attentionVjp(q, k, v, { returnLogSumExp: 'no' } as never),
      'returnLogSumExp',
      /a boolean/,
    );
    // A valid call a named backend cannot run is unsupported (as in the forward), not invalid.
    assert.throws(
      () => attentionBackward(q, k, v, r.output, lse, dO, { implementation: 'cudnn' }),
      (e: unknown) => e instanceof UnsupportedError && /^cudnn backward cannot run this case/.test(e.message),
    );
  });

  it('refuses a paged cache or packed sequences when the pullback is asked for, before any forward', () => {
    const pool = normal([4, 4, 2, 8], 6);
    const paged = { blockTable: [[0, 1]], keyValueSeqLengths: [5] };
    const packed = { querySeqOffsets: [0, 4], keyValueSeqOffsets: [0, 5] };
    for (const [name, call] of [
      ['a paged KV cache', () => attentionVjp(normal([1, 1, 2, 8], 7), pool, pool, paged)],
      [
        'packed sequences',
        () => attentionVjp(normal([4, 2, 8], 8), normal([5, 2, 8], 9), normal([5, 2, 8], 9), packed),
      ],
    ] as const)
      assert.throws(
        call,
        (e: unknown) =>
          e instanceof UnsupportedError &&
          e.message.includes(`${name} `) &&
          /dense inputs only/.test(e.message),
      );
  });

  it('float32Output: the vjp keeps a float32 output; attentionBackward takes one for 16-bit inputs', () => {
    const bf = (t: Tensor) => t.astype('bfloat16');
    const [qb, kb, vb, dOb] = [q, k, v, dO].map(bf);
    const f = attentionVjp(qb, kb, vb, { isCausal: true, implementation: 'flash', float32Output: true });
    const wide = f.float32Output as Tensor;
    assert.equal(wide.dtype, 'float32');
    assert.deepEqual(wide.shape, f.output.shape);
    // The float32 output rounds to the forward's output, and D taken from it is what the backward uses.
    assert.deepEqual(Array.from(bf(wide).toFloat64Array()), Array.from(f.output.toFloat64Array()));
    const viaVjp = f.backward(dOb).dKey.toFloat64Array();
    const explicit = attentionBackward(qb, kb, vb, wide, f.logSumExp, dOb, {
      isCausal: true,
      implementation: 'flash',
    });
    assert.deepEqual(Array.from(explicit.dKey.toFloat64Array()), Array.from(viaVjp));
    assert.equal(attentionVjp(q, k, v, { float32Output: true }).float32Output, undefined); // float64: nothing to widen
    expectError(
      () => attentionVjp(qb, kb, vb, { float32Output: 'yes' as never }),
      'float32Output',
      /boolean/,
    );
    expectError(
      () => attentionBackward(qb, kb, vb, wide, f.logSumExp, dOb, { float32Output: true }),
      'options.float32Output',
      /attentionVjp only/,
    );
    expectError(
      () => attentionBackward(q, k, v, wide.astype('float32'), f.logSumExp, dO),
      'output.dtype',
      /float64/,
    );
    // cuDNN's graph reads O in the inputs' dtype: it refuses a float32 output, saying so (no GPU needed to ask).
    const support = supports(cudnnBackward, validateBackward(qb, kb, vb, wide, f.logSumExp, dOb, {}));
    assert.ok(!support.ok && /float32 output/.test(support.reason), JSON.stringify(support));
  });

  it('validates query, key, value and options as the forward does', () => {
    expectError(() => attentionVjp(q, normal([1, 5, 2, 7], 1), v), 'key', /head dim H=8/);
    expectError(
      () => attentionBackward(q, k, v, r.output, r.logSumExp!, dO, { scale: Number.NaN }),
      'scale',
      /finite/,
    );
  });
});
