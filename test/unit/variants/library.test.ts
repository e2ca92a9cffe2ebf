/**
 * Every ready-made modifier, forward and backward, on the CPU reference and CPU flash, against the
 * float64 reference given the equivalent dense mask or bias; relativeBias's table gradient by finite
 * differences of the oracle; packed documents against per-document calls.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { attention } from '../../../src/api/attention.js';
import { attentionVjp } from '../../../src/api/backward.js';
import type { AttentionOptions } from '../../../src/backends/problem.js';
import { InvalidArgumentError } from '../../../src/errors.js';
import { randomNormal } from '../../../src/tensor/random.js';
import { Tensor } from '../../../src/tensor/tensor.js';
import {
  alibi,
  alibiSlopes,
  and,
  causal,
  documentMask,
  not,
  or,
  prefixLm,
  relativeBias,
  sinks,
  slidingWindow,
  softcap,
} from '../../../src/variants/library.js';
import { maskMod, scoreMod } from '../../../src/variants/modifiers.js';

const [B, T, N, K, H] = [2, 12, 4, 2, 8];
const S = T;
const q = randomNormal([B, T, N, H], { seed: 11, dtype: 'float64' });
const k = randomNormal([B, S, K, H], { seed: 12, dtype: 'float64' });
const v = randomNormal([B, S, K, H], { seed: 13, dtype: 'float64' });
const dOut = randomNormal([B, T, N, H], { seed: 14, dtype: 'float64' });
const docIds = Tensor.fromArray(
  [0, 0, 0, 1, 1, 1, 1, 2, 2, 3, 3, 3, 0, 0, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2],
  [B, T],
  'int32',
);
const ids = docIds.toFloat64Array();
const lengths = Tensor.fromArray([3, 7], [B], 'int32');
const slopes = alibiSlopes(N);
const slope = slopes.toFloat64Array();
const table = Tensor.fromArray(
  Array.from({ length: N * 7 }, (_, i) => Math.fround(Math.sin(i) * 0.5)),
  [N, 7],
  'float32',
);
const tab = table.toFloat64Array();

type Keep = (b: number, n: number, i: number, j: number) => boolean;
type Bias = (b: number, n: number, i: number, j: number) => number;

const denseMask = (keep: Keep) =>
  Tensor.fromArray(
    Array.from({ length: B * N * T * S }, (_, x) => {
      const [b, n, i, j] = [
        Math.floor(x / (N * T * S)),
        Math.floor(x / (T * S)) % N,
        Math.floor(x / S) % T,
        x % S,
      ];
      return keep(b, n, i, j) ? 1 : 0;
    }),
    [B, N, T, S],
    'bool',
  );
const denseBias = (bias: Bias) =>
  Tensor.fromArray(
    Array.from({ length: B * N * T * S }, (_, x) => {
      const [b, n, i, j] = [
        Math.floor(x / (N * T * S)),
        Math.floor(x / (T * S)) % N,
        Math.floor(x / S) % T,
        x % S,
      ];
      return bias(b, n, i, j);
    }),
    [B, N, T, S],
    'float64',
  );

function close(a: Tensor, b: Tensor, what: string, tol = 1e-11): void {
  const [x, y] = [a.toFloat64Array(), b.toFloat64Array()];
  assert.equal(x.length, y.length, what);
  let worst = 0;
  for (let i = 0; i < x.length; i++) worst = Math.max(worst, x[i] === y[i] ? 0 : Math.abs(x[i] - y[i]));
  assert.ok(worst < tol, `${what}: max |Δ| ${worst}`);
}

/** Forward and backward of `mods` on reference and CPU flash against the reference with `dense`. */
function matches(mods: AttentionOptions, dense: AttentionOptions): void {
  const want = attentionVjp(q, k, v, { ...dense, implementation: 'reference' });
  const wantGrads = want.backward(dOut);
  for (const implementation of ['reference', 'flash'] as const) {
    const got = attentionVjp(q, k, v, { ...mods, implementation });
    close(got.output, want.output, `${implementation} output`);
    close(got.logSumExp, want.logSumExp, `${implementation} lse`, 1e-6);
    const grads = got.backward(dOut);
    close(grads.dQuery, wantGrads.dQuery, `${implementation} dQuery`);
    close(grads.dKey, wantGrads.dKey, `${implementation} dKey`);
    close(grads.dValue, wantGrads.dValue, `${implementation} dValue`);
    assert.equal(grads.backend, implementation);
  }
}

describe('ready-made masks equal their dense boolean masks, forward and backward', () => {
  const cases: [string, AttentionOptions, Keep][] = [
    ['causal', { maskMod: causal() }, (_b, _n, i, j) => j <= i],
    ['slidingWindow(3, 1)', { maskMod: slidingWindow(3, 1) }, (_b, _n, i, j) => j >= i - 3 && j <= i + 1],
    [
      'documentMask (B, T)',
      { maskMod: documentMask(docIds) },
      (b, _n, i, j) => ids[b * T + i] === ids[b * T + j],
    ],
    [
      'documentMask (T), causal',
      { maskMod: and(documentMask(Tensor.fromArray(Array.from(ids.slice(0, T)), [T], 'int32')), causal()) },
      (_b, _n, i, j) => ids[i] === ids[j] && j <= i,
    ],
    ['prefixLm', { maskMod: prefixLm(lengths) }, (b, _n, i, j) => j < [3, 7][b] || j <= i],
    [
      'or(slidingWindow(2, 0), sinks(2))',
      { maskMod: or(slidingWindow(2, 0), sinks(2)) },
      (_b, _n, i, j) => (j >= i - 2 && j <= i) || j < 2,
    ],
    ['not(causal)', { maskMod: not(causal()) }, (_b, _n, i, j) => !(j <= i)],
    [
      'and(documentMask, not(sinks(1)))',
      { maskMod: and(documentMask(docIds), not(sinks(1))) },
      (b, _n, i, j) => ids[b * T + i] === ids[b * T + j] && j >= 1,
    ],
  ];
  for (const [name, mods, keep] of cases) it(name, () => matches(mods, { mask: denseMask(keep) }));
});

describe('ready-made score modifiers equal their dense bias, forward and backward', () => {
  it('alibi', () =>
    matches({ scoreMod: alibi(slopes) }, { bias: denseBias((_b, n, i, j) => slope[n] * (j - i)) }));
  it('alibi(N) builds the usual slopes', () => {
    assert.deepEqual(Array.from(alibiSlopes(4).toFloat64Array()), [0.25, 0.0625, 0.015625, 0.00390625]);
  });
  it('relativeBias', () =>
    matches(
      { scoreMod: relativeBias(table) },
      { bias: denseBias((_b, n, i, j) => tab[n * 7 + Math.min(Math.max(j - i, -3), 3) + 3]) },
    ));
  it('alibi with a causal maskMod and a block mask-free window', () =>
    matches(
      { scoreMod: alibi(slopes), maskMod: causal(), localWindowSize: [4, 0] },
      { bias: denseBias((_b, n, i, j) => slope[n] * (j - i)), isCausal: true, localWindowSize: [4, 0] },
    ));
});

describe('softcap', () => {
  it('forward: c·tanh(s/c) before the softmax, by a direct float64 loop', () => {
    const c = 0.7;
    const out = attention(q, k, v, {
      scoreMod: softcap(c),
      implementation: 'reference',
    }).output.toFloat64Array();
    const flash = attention(q, k, v, { scoreMod: softcap(c), implementation: 'flash' }).output;
    const [qq, kk, vv] = [q.toFloat64Array(), k.toFloat64Array(), v.toFloat64Array()];
    for (const [b, i, n] of [
      [0, 0, 0],
      [1, 5, 3],
      [0, 11, 2],
    ]) {
      const kh = Math.floor(n / (N / K));
      const s = Array.from({ length: S }, (_, j) => {
        let dot = 0;
        for (let h = 0; h < H; h++)
          dot += qq[((b * T + i) * N + n) * H + h] * kk[((b * S + j) * K + kh) * H + h];
        return c * Math.tanh(dot / Math.sqrt(H) / c);
      });
      const m = Math.max(...s);
      const w = s.map((x) => Math.exp(x - m));
      const sum = w.reduce((a, x) => a + x, 0);
      for (let h = 0; h < H; h++) {
        let o = 0;
        for (let j = 0; j < S; j++) o += (w[j] / sum) * vv[((b * S + j) * K + kh) * H + h];
        assert.ok(Math.abs(out[((b * T + i) * N + n) * H + h] - o) < 1e-12);
      }
    }
    close(flash, Tensor.fromArray(out, [B, T, N, H], 'float64'), 'flash softcap');
  });
  it('backward: the gradient of Σ dOut·out by central differences of the oracle', () => {
    const c = 0.9;
    const grads = attentionVjp(q, k, v, { scoreMod: softcap(c), implementation: 'flash' }).backward(dOut);
    const loss = (qt: Tensor) => {
      const o = attention(qt, k, v, {
        scoreMod: softcap(c),
        implementation: 'reference',
      }).output.toFloat64Array();
      const d = dOut.toFloat64Array();
      return o.reduce((a, x, i) => a + x * d[i], 0);
    };
    const base = Array.from(q.toFloat64Array());
    for (const at of [0, 37, 200, base.length - 1]) {
      const eps = 1e-5;
      const bump = (delta: number) => {
        const values = base.slice();
        values[at] += delta;
        return loss(Tensor.fromArray(values, q.shape, 'float64'));
      };
      const numeric = (bump(eps) - bump(-eps)) / (2 * eps);
      assert.ok(Math.abs(grads.dQuery.toFloat64Array()[at] - numeric) < 1e-7, `dQuery[${at}]`);
    }
  });
});

describe('relativeBias gradient', () => {
  it('dCaptures.table equals finite differences of the oracle and the dense bias gradient summed by bucket', () => {
    for (const implementation of ['reference', 'flash'] as const) {
      const grads = attentionVjp(q, k, v, {
        scoreMod: relativeBias(table),
        isCausal: true,
        implementation,
      }).backward(dOut);
      const dTable = grads.dCaptures?.table;
      assert.ok(dTable, 'dCaptures.table');
      assert.deepEqual(dTable.shape, [N, 7]);
      assert.equal(dTable.dtype, 'float32');
      const got = dTable.toFloat64Array();
      // The dense bias's gradient, summed into the bucket each (i, j) reads.
      const bias = denseBias((_b, n, i, j) => tab[n * 7 + Math.min(Math.max(j - i, -3), 3) + 3]);
      const dBias = attentionVjp(q, k, v, { bias, isCausal: true, implementation: 'reference' })
        .backward(dOut)
        .dBias?.toFloat64Array();
      assert.ok(dBias);
      const want = new Float64Array(N * 7);
      for (let x = 0; x < dBias.length; x++) {
        const [n, i, j] = [Math.floor(x / (T * S)) % N, Math.floor(x / S) % T, x % S];
        want[n * 7 + Math.min(Math.max(j - i, -3), 3) + 3] += dBias[x];
      }
      for (let x = 0; x < want.length; x++)
        assert.ok(Math.abs(got[x] - want[x]) < 1e-5, `${implementation} [${x}]`);
      // Central differences of Σ dOut·out through the oracle, for a few entries.
      const d = dOut.toFloat64Array();
      for (const at of [0, 3, 9, 27]) {
        const bump = (delta: number) => {
          const values = Array.from(tab);
          values[at] += delta;
          const t = Tensor.fromArray(values, [N, 7], 'float64').astype('float32');
          const o = attention(q, k, v, {
            scoreMod: relativeBias(t),
            isCausal: true,
            implementation: 'reference',
          }).output.toFloat64Array();
          return o.reduce((a, x, i) => a + x * d[i], 0);
        };
        const numeric = (bump(1e-3) - bump(-1e-3)) / 2e-3;
        assert.ok(
          Math.abs(got[at] - numeric) < 2e-3 * Math.max(1, Math.abs(numeric)),
          `fd [${at}]: ${got[at]} vs ${numeric}`,
        );
      }
    }
  });
});

describe('packed documents', () => {
  it('documentMask over a packed batch equals one call per document', () => {
    const starts = [0, 3, 7, 9, 12];
    const causalDocs = and(
      documentMask(Tensor.fromArray(Array.from(ids.slice(0, T)), [T], 'int32')),
      causal(),
    );
    const one = (t: Tensor) => t.toFloat64Array().slice(0, T * N * H);
    const q1 = Tensor.fromArray(one(q), [1, T, N, H], 'float64');
    const k1 = Tensor.fromArray(k.toFloat64Array().slice(0, S * K * H), [1, S, K, H], 'float64');
    const v1 = Tensor.fromArray(v.toFloat64Array().slice(0, S * K * H), [1, S, K, H], 'float64');
    const packed = attention(q1, k1, v1, {
      maskMod: causalDocs,
      implementation: 'flash',
    }).output.toFloat64Array();
    for (let d = 0; d + 1 < starts.length; d++) {
      const [a, e] = [starts[d], starts[d + 1]];
      const slice = (t: Tensor, heads: number) =>
        Tensor.fromArray(
          t.toFloat64Array().slice(a * heads * H, e * heads * H),
          [1, e - a, heads, H],
          'float64',
        );
      const alone = attention(slice(q1, N), slice(k1, K), slice(v1, K), {
        isCausal: true,
        implementation: 'reference',
      }).output.toFloat64Array();
      for (let x = 0; x < alone.length; x++) assert.ok(Math.abs(packed[a * N * H + x] - alone[x]) < 1e-12);
    }
  });
});

describe('ready-made argument checks', () => {
  const refused = (run: () => unknown, argument: string) =>
    assert.throws(run, (e: unknown) => e instanceof InvalidArgumentError && e.argument === argument);
  it('names the argument', () => {
    refused(() => slidingWindow(-1, 0), 'slidingWindow left');
    refused(() => documentMask(Tensor.zeros([4], 'float32')), 'documentMask docIds.dtype');
    refused(() => prefixLm(Tensor.zeros([2, 2], 'int32')), 'prefixLm lengths');
    refused(() => alibi(Tensor.zeros([4], 'float64')), 'alibi slopes.dtype');
    refused(() => softcap(0), 'softcap c');
    refused(() => relativeBias(Tensor.zeros([4, 6], 'float32')), 'relativeBias table');
    refused(() => sinks(1.5), 'sinks n');
    refused(() => and(), 'and');
    refused(() => or(causal(), scoreMod('score') as never), 'or argument 1');
    refused(
      () => and(maskMod('x[q] > 0', { x: docIds.reshape([B * T]) }), maskMod('x[kv] > 0', { x: lengths })),
      'and',
    );
  });
});
