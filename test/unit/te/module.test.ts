import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { dotProductAttention } from '../../../src/api/attention.js';
import type { AttentionOptions } from '../../../src/backends/problem.js';
import { InvalidArgumentError, UnsupportedError } from '../../../src/errors.js';
import { DotProductAttention, SequenceDescriptor } from '../../../src/te/module.js';
import { MASK_TYPES } from '../../../src/te/options.js';
import { randomNormal } from '../../../src/tensor/random.js';
import { Tensor } from '../../../src/tensor/tensor.js';

const [B, T, S, N, K, H] = [2, 7, 9, 4, 2, 8];
const q = randomNormal([B, T, N, H], { seed: 1 });
const k = randomNormal([B, S, K, H], { seed: 2 });
const v = randomNormal([B, S, K, H], { seed: 3 });
const qLens = [5, 7];
const kvLens = [9, 4];

function maxDiff(a: Tensor, b: Tensor): number {
  assert.deepEqual(a.shape, b.shape);
  const [x, y] = [a.toFloat64Array(), b.toFloat64Array()];
  let m = 0;
  for (let i = 0; i < x.length; i++) m = Math.max(m, Math.abs(x[i] - y[i]));
  return m;
}

/** A keep-mask (B,1,T,S) written out pair by pair from the definition of each TE mask type. */
function handMask(type: string): Tensor {
  const bits = new Uint8Array(B * T * S);
  for (let b = 0; b < B; b++) {
    const [tb, sb] = type.startsWith('padding') ? [qLens[b], kvLens[b]] : [T, S];
    const shift = type.endsWith('bottom_right') ? sb - tb : 0;
    for (let i = 0; i < T; i++) {
      for (let j = 0; j < S; j++) {
        let keep = i < tb && j < sb;
        if (type.includes('causal')) keep &&= j <= i + shift;
        bits[(b * T + i) * S + j] = keep ? 1 : 0;
      }
    }
  }
  return Tensor.fromRaw(bits, [B, 1, T, S], 'bool');
}

/** Zeroes rows past each batch's query length, where a plain mask leaves them visible. */
function zeroPaddedRows(t: Tensor, lens: number[] | null): Tensor {
  if (!lens) return t;
  const x = t.toFloat64Array();
  for (let b = 0; b < B; b++)
    for (let i = lens[b]; i < T; i++) x.fill(0, (b * T + i) * N * H, (b * T + i + 1) * N * H);
  return Tensor.fromArray(x, t.shape, t.dtype);
}

describe('te.DotProductAttention on the CPU', () => {
  for (const type of MASK_TYPES) {
    test(`mask type ${type} matches a hand-written mask through dotProductAttention`, () => {
      const attn = new DotProductAttention({
        headDim: H,
        numAttentionHeads: N,
        numGqaGroups: K,
        attnMaskType: type,
      });
      const padding = type.startsWith('padding');
      const sequenceDescriptor = padding ? SequenceDescriptor.fromSeqLens(qLens, kvLens) : undefined;
      const result = attn.apply(q, k, v, { sequenceDescriptor });
      assert.equal(result.precision, 'bf16');
      const expected = zeroPaddedRows(
        dotProductAttention(q, k, v, { mask: handMask(type) }),
        padding ? qLens : null,
      );
      assert.ok(maxDiff(result.output, expected) < 1e-6, `${type}: ${maxDiff(result.output, expected)}`);
    });
  }

  test("TE's default mask type is causal", () => {
    const attn = new DotProductAttention({ headDim: H, numAttentionHeads: N, numGqaGroups: K });
    assert.equal(maxDiff(attn.forward(q, k, v), dotProductAttention(q, k, v, { isCausal: true })), 0);
  });

  test('post_scale_bias adds the bias after scaling; pre_scale_bias before (a two-key case by hand)', () => {
    const q1 = Tensor.fromArray([1, 0], [1, 1, 1, 2], 'float64');
    const k1 = Tensor.fromArray([2, 0, 0, 0], [1, 2, 1, 2], 'float64');
    const v1 = Tensor.fromArray([10, 0, 0, 10], [1, 2, 1, 2], 'float64');
    const bias = Tensor.fromArray([1, 3], [1, 1, 1, 2], 'float64');
    const make = (attnBiasType: 'pre_scale_bias' | 'post_scale_bias') =>
      new DotProductAttention({
        headDim: 2,
        numAttentionHeads: 1,
        attnMaskType: 'no_mask',
        attnBiasType,
        scaleFactor: 0.5,
      });
    // logits: q·k = [2, 0]; post: 0.5·[2,0] + [1,3] = [2, 3]; pre: 0.5·([2,0] + [1,3]) = [1.5, 1.5].
    const softmax = (a: number, b: number) => [
      Math.exp(a) / (Math.exp(a) + Math.exp(b)),
      Math.exp(b) / (Math.exp(a) + Math.exp(b)),
    ];
    const [p0, p1] = softmax(2, 3);
    const post = make('post_scale_bias').forward(q1, k1, v1, { bias }).toFloat64Array();
    assert.ok(Math.abs(post[0] - 10 * p0) < 1e-12 && Math.abs(post[1] - 10 * p1) < 1e-12);
    const pre = make('pre_scale_bias').forward(q1, k1, v1, { bias }).toFloat64Array();
    assert.ok(Math.abs(pre[0] - 5) < 1e-12 && Math.abs(pre[1] - 5) < 1e-12);
    // The bias type is inferred as post_scale_bias when a bias comes without one.
    const inferred = new DotProductAttention({
      headDim: 2,
      numAttentionHeads: 1,
      attnMaskType: 'no_mask',
      scaleFactor: 0.5,
    });
    assert.deepEqual(Array.from(inferred.forward(q1, k1, v1, { bias }).toFloat64Array()), Array.from(post));
  });

  test('layouts: sbhd, bs3hd, bshd_bs2hd and sb3hd give the bshd result', () => {
    const [Bp, L, Np, Hp] = [2, 5, 2, 4];
    const parts = [11, 12, 13].map((seed) => randomNormal([Bp, L, Np, Hp], { seed }));
    const [pq, pk, pv] = parts;
    const cfg = { headDim: Hp, numAttentionHeads: Np, attnMaskType: 'causal' as const };
    const expected = new DotProductAttention(cfg).forward(pq, pk, pv);
    const x = parts.map((p) => p.toFloat64Array());
    const build = (shape: number[], at: (i: number[]) => number) => {
      const out = new Float64Array(shape.reduce((a, c) => a * c, 1));
      let o = 0;
      const walk = (prefix: number[]) => {
        if (prefix.length === shape.length) out[o++] = at(prefix);
        else for (let i = 0; i < shape[prefix.length]; i++) walk([...prefix, i]);
      };
      walk([]);
      return Tensor.fromArray(out, shape, 'float32');
    };
    const idx = (b: number, s: number, n: number, h: number) => ((b * L + s) * Np + n) * Hp + h;
    const sb = (p: number) => build([L, Bp, Np, Hp], ([s, b, n, h]) => x[p][idx(b, s, n, h)]);
    const qkv = build([Bp, L, 3, Np, Hp], ([b, s, w, n, h]) => x[w][idx(b, s, n, h)]);
    const kv = build([Bp, L, 2, Np, Hp], ([b, s, w, n, h]) => x[w + 1][idx(b, s, n, h)]);
    const sqkv = build([L, Bp, 3, Np, Hp], ([s, b, w, n, h]) => x[w][idx(b, s, n, h)]);
    const transposeBack = (t: Tensor) => build([Bp, L, Np, Hp], ([b, s, n, h]) => t.get(s, b, n, h));

    const sbhd = new DotProductAttention({ ...cfg, transposeBatchSequence: true }).forward(
      sb(0),
      sb(1),
      sb(2),
    );
    assert.deepEqual(sbhd.shape, [L, Bp, Np, Hp]);
    assert.equal(maxDiff(transposeBack(sbhd), expected), 0);
    assert.equal(maxDiff(new DotProductAttention({ ...cfg, qkvLayout: 'bs3hd' }).forward(qkv), expected), 0);
    assert.equal(
      maxDiff(new DotProductAttention({ ...cfg, qkvLayout: 'bshd_bs2hd' }).forward(pq, kv), expected),
      0,
    );
    const sb3 = new DotProductAttention({ ...cfg, qkvLayout: 'sb3hd' }).forward(sqkv);
    assert.equal(maxDiff(transposeBack(sb3), expected), 0);
    assert.throws(
      () => new DotProductAttention({ ...cfg, qkvLayout: 'bs3hd' }).forward(qkv, pk),
      /key: expected null or undefined with the packed layout bs3hd/,
    );
    assert.throws(
      () => new DotProductAttention({ ...cfg, qkvLayout: 'sbhd_sbhd_sbhd', transposeBatchSequence: false }),
      InvalidArgumentError,
    );
  });

  test('windowSize: negative bounds are unbounded, [-1,-1] is no window', () => {
    const run = (windowSize: [number, number], options: AttentionOptions) => {
      const attn = new DotProductAttention({
        headDim: H,
        numAttentionHeads: N,
        numGqaGroups: K,
        attnMaskType: 'no_mask',
        windowSize,
      });
      return maxDiff(attn.forward(q, k, v), dotProductAttention(q, k, v, options));
    };
    assert.equal(run([2, 1], { localWindowSize: [2, 1] }), 0);
    assert.equal(run([-1, 0], { localWindowSize: [Number.POSITIVE_INFINITY, 0] }), 0);
    assert.equal(run([-1, -1], {}), 0);
  });

  test("a legacy mask is TE's convention: true masks a pair out", () => {
    const attn = new DotProductAttention({
      headDim: H,
      numAttentionHeads: N,
      numGqaGroups: K,
      attnMaskType: 'padding',
    });
    const keep = handMask('causal');
    const masked = Tensor.fromRaw(
      (keep.data as Uint8Array).map((x) => 1 - x),
      keep.shape,
      'bool',
    );
    const out = attn.forward(q, k, v, { sequenceDescriptor: SequenceDescriptor.fromLegacyMask(masked) });
    assert.equal(maxDiff(out, dotProductAttention(q, k, v, { mask: keep })), 0);
  });

  test('dropout: a non-zero rate is an UnsupportedError unless deterministic', () => {
    const attn = new DotProductAttention({
      headDim: H,
      numAttentionHeads: N,
      numGqaGroups: K,
      attentionDropout: 0.1,
    });
    assert.throws(() => attn.forward(q, k, v), UnsupportedError);
    assert.throws(() => attn.forward(q, k, v), /attentionDropout=0.1 is not implemented/);
    assert.equal(
      maxDiff(
        attn.forward(q, k, v, { deterministic: true }),
        dotProductAttention(q, k, v, { isCausal: true }),
      ),
      0,
    );
  });

  test('errors name the module option and the argument', () => {
    const attn = new DotProductAttention({ headDim: H, numAttentionHeads: 8, numGqaGroups: K });
    assert.throws(
      () => attn.forward(q, k, v),
      /query: expected N=8 \(numAttentionHeads of the module\), got N=4/,
    );
    const pad = new DotProductAttention({
      headDim: H,
      numAttentionHeads: N,
      numGqaGroups: K,
      attnMaskType: 'padding',
    });
    assert.throws(() => pad.forward(q, k, v), /sequenceDescriptor: expected a SequenceDescriptor/);
    const causal = new DotProductAttention({ headDim: H, numAttentionHeads: N, numGqaGroups: K });
    assert.throws(
      () => causal.forward(q, k, v, { sequenceDescriptor: SequenceDescriptor.fromSeqLens(qLens) }),
      /use a padding mask type/,
    );
    const noBias = new DotProductAttention({
      headDim: H,
      numAttentionHeads: N,
      numGqaGroups: K,
      attnBiasType: 'no_bias',
    });
    assert.throws(
      () => noBias.forward(q, k, v, { bias: Tensor.zeros([1, N, T, S]) }),
      /bias: expected none with attnBiasType 'no_bias'/,
    );
    assert.throws(
      () => new DotProductAttention({ headDim: H, numAttentionHeads: 6, numGqaGroups: 4 }),
      /numGqaGroups/,
    );
    assert.throws(
      () => new DotProductAttention({ headDim: H, numAttentionHeads: 4, attnMaskType: 'arbitrary' as never }),
      /attnMaskType/,
    );
  });
});
