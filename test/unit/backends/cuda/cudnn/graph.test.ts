/**
 * The cuDNN graphs, checked without cuDNN: each composite graph attnlab would hand to cuDNN is
 * interpreted in float64 (cudnn-graph-eval.ts) and must give what the CPU reference gives, for every
 * case of the shared correctness matrix that cuDNN accepts; the cases it refuses are listed by name.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { attention } from '../../../../../src/api/attention.js';
import { validateAttention } from '../../../../../src/api/validate.js';
import {
  type DescribeOptions,
  describeSdpa,
  type SdpaFeatures,
} from '../../../../../src/backends/cuda/cudnn/features.js';
import { MASK_FILL_BITS } from '../../../../../src/backends/cuda/cudnn/masks.js';
import { buildSdpaGraph } from '../../../../../src/backends/cuda/cudnn/sdpa-graph.js';
import type { AttentionOptions, AttentionProblem } from '../../../../../src/backends/problem.js';
import { buildInputs, CASES } from '../../../../../src/check/cases.js';
import type { FloatDType } from '../../../../../src/tensor/dtype.js';
import { randomNormal } from '../../../../../src/tensor/random.js';
import { Tensor } from '../../../../../src/tensor/tensor.js';
import { evaluateGraph, H200, maxError } from '../../../../support/cudnn-graph-eval.js';

interface Inputs {
  q: Tensor;
  k: Tensor;
  v: Tensor;
  options: AttentionOptions;
}

/** Interprets the composite graph and compares O and the log-sum-exp with the CPU reference. */
function checkComposite({ q, k, v, options }: Inputs, describeOptions: DescribeOptions = {}): void {
  const p = validateAttention(q, k, v, { ...options, returnLogSumExp: true });
  const d = describeSdpa(p, H200, { graph: 'composite', ...describeOptions });
  assert.ok(d.ok, d.ok ? '' : d.reason);
  const spec = buildSdpaGraph(d.features);
  const memory = {
    query: p.query.toFloat64Array(),
    key: p.key.toFloat64Array(),
    value: p.value.toFloat64Array(),
    bias: d.prepare.convertBias
      ? convertedBias(p, d.features, d.prepare.foldedRight)
      : p.bias?.tensor.toFloat64Array(),
    seqLenQ: Float64Array.from(p.querySeqLengths ?? new Array(p.B).fill(p.T)),
    seqLenKv: Float64Array.from(p.keyValueSeqLengths ?? new Array(p.B).fill(p.S)),
  };
  const got = evaluateGraph(spec, { memory, scale: p.scale });
  if (d.prepare.fixEmptyRows) fixEmptyRowsLikeTheDevice(p, d.features, d.prepare.foldedRight, got);
  // The reference runs on float64 copies (exact: every bf16/fp16 value is a float64) so that its
  // output is not rounded to the input dtype and any masking mistake stands out.
  const exact = (t: Tensor) => t.astype('float64');
  const bias = options.bias ? exact(options.bias) : undefined;
  const want = attention(exact(q), exact(k), exact(v), {
    ...options,
    bias,
    implementation: 'reference',
    returnLogSumExp: true,
  });
  const error = maxError(got.output, want.output.toFloat64Array());
  assert.ok(error < 1e-9, `O differs from the reference by ${error}`);
  if (!got.stats || !want.logSumExp) return;
  const { B, T, N } = p;
  const lse = want.logSumExp.toFloat64Array();
  for (let b = 0; b < B; b++)
    for (let t = 0; t < (p.querySeqLengths ? p.querySeqLengths[b] : T); t++)
      for (let n = 0; n < N; n++) {
        const index = d.features.stats === 'bnt' ? (b * N + n) * T + t : (b * T + t) * N + n;
        const [g, w] = [got.stats[index], lse[(b * T + t) * N + n]];
        assert.ok(
          g === w || Math.abs(g - w) <= 1e-5 * (1 + Math.abs(w)),
          `Stats[b=${b},t=${t},n=${n}] ${g} vs ${w}`,
        );
      }
}

function inputs(
  shape: { B: number; T: number; S: number; N: number; K: number; H: number },
  options: AttentionOptions,
  dtype: FloatDType = 'bfloat16',
): Inputs {
  const { B, T, S, N, K, H } = shape;
  const q = randomNormal([B, T, N, H], { seed: 11, dtype });
  const k = randomNormal([B, S, K, H], { seed: 12, dtype });
  const v = randomNormal([B, S, K, H], { seed: 13, dtype });
  return { q, k, v, options };
}

function problem(shape: Parameters<typeof inputs>[0], options: AttentionOptions) {
  const { q, k, v } = inputs(shape, options);
  return validateAttention(q, k, v, { ...options, returnLogSumExp: true });
}

/**
 * The bias masks.cu's conversion writes, by its rule: the bias (or 0) where kept — by the mask and a
 * folded bottom-right bound j ≤ t + S_b − T_b + right — the fill elsewhere.
 */
function convertedBias(p: AttentionProblem, f: SdpaFeatures, foldedRight: number | null): Float64Array {
  const [D0, D1, T, S] = f.bias?.dims ?? [];
  const fill = Tensor.fromRaw(Uint16Array.of(MASK_FILL_BITS[f.dtype]), [1], f.dtype).toFloat64Array()[0];
  const mask = p.mask?.tensor.toFloat64Array();
  const bias = p.bias?.tensor.toFloat64Array();
  const at = (o: AttentionProblem['mask'], i: number[]) =>
    i.reduce((sum, x, d) => sum + x * (o?.strides[d] ?? 0), 0);
  const out = new Float64Array(D0 * D1 * T * S);
  let index = 0;
  for (let b = 0; b < D0; b++)
    for (let n = 0; n < D1; n++)
      for (let t = 0; t < T; t++)
        for (let s = 0; s < S; s++, index++) {
          const d = (p.keyValueSeqLengths?.[b] ?? S) - (p.querySeqLengths?.[b] ?? T);
          const inBound = foldedRight === null || s <= t + d + foldedRight;
          const keep = inBound && (mask === undefined || mask[at(p.mask, [b, n, t, s])] !== 0);
          out[index] = keep ? (bias ? bias[at(p.bias, [b, n, t, s])] : 0) : fill;
        }
  return out;
}

/** What masks.cu's empty-row pass writes: zeros and −inf in every row with no visible key. */
function fixEmptyRowsLikeTheDevice(
  p: AttentionProblem,
  f: SdpaFeatures,
  foldedRight: number | null,
  got: ReturnType<typeof evaluateGraph>,
) {
  const { B, T, S, N, Hv } = f;
  const right = f.right ?? foldedRight;
  const mask = p.mask?.tensor.toFloat64Array();
  for (let b = 0; b < B; b++)
    for (let t = 0; t < T; t++)
      for (let n = 0; n < N; n++) {
        const Tb = p.querySeqLengths?.[b] ?? T;
        const Sb = p.keyValueSeqLengths?.[b] ?? S;
        const d = f.alignment === 'bottom_right' ? Sb - Tb : 0;
        const lo = Math.max(0, f.left === null ? 0 : t + d - f.left);
        const hi = Math.min(Sb - 1, right === null ? Sb - 1 : t + d + right);
        let sees = t < Tb && lo <= hi;
        if (sees && mask && p.mask) {
          const [m0, m1, m2, m3] = p.mask.strides;
          sees = false;
          for (let s = lo; s <= hi && !sees; s++) sees = mask[b * m0 + n * m1 + t * m2 + s * m3] !== 0;
        }
        if (sees) continue;
        got.output.fill(0, ((b * T + t) * N + n) * Hv, ((b * T + t) * N + n + 1) * Hv);
        if (got.stats) got.stats[f.stats === 'bnt' ? (b * N + n) * T + t : (b * T + t) * N + n] = -Infinity;
      }
}

describe('cuDNN composite graph, interpreted in float64', () => {
  for (const c of CASES) {
    it(c.name, () => {
      const { q, k, v, options } = buildInputs(c, 'bfloat16', 7);
      const p = validateAttention(q, k, v, { ...options, returnLogSumExp: true });
      const d = describeSdpa(p, H200);
      assert.ok(d.ok, d.ok ? '' : d.reason);
      checkComposite({ q, k, v, options });
      checkComposite({ q, k, v, options }, { statsLayout: 'bnt' });
    });
  }

  const base = { B: 2, T: 24, S: 40, N: 4, K: 2, H: 16 };
  const extra: Array<[string, typeof base, AttentionOptions]> = [
    ['bottom-right causal T<S', base, { isCausal: true, causalAlignment: 'bottom_right' }],
    ['bottom-right window [3,2]', base, { localWindowSize: [3, 2], causalAlignment: 'bottom_right' }],
    [
      'bottom-right window [5,0] + padding',
      base,
      {
        localWindowSize: [5, 0],
        causalAlignment: 'bottom_right',
        querySeqLengths: [24, 10],
        keyValueSeqLengths: [30, 40],
      },
    ],
    [
      'bottom-right causal + padding, T_b > S_b rows covered',
      base,
      {
        isCausal: true,
        causalAlignment: 'bottom_right',
        querySeqLengths: [20, 5],
        keyValueSeqLengths: [40, 33],
      },
    ],
    [
      'top-left window [6,3] + padding',
      base,
      { localWindowSize: [6, 3], querySeqLengths: [24, 17], keyValueSeqLengths: [40, 21] },
    ],
    ['left-only window (right unbounded)', base, { localWindowSize: [4, 1000] }],
    ['bias (B,N,T,S) + window', base, { localWindowSize: [7, 7] }],
    // A bottom-right right bound beside a bias is folded into the converted bias.
    ['bias (B,N,T,S) + bottom-right causal T<S', base, { isCausal: true, causalAlignment: 'bottom_right' }],
    [
      'bias (B,N,T,S) + bottom-right window [3,2] + padding',
      base,
      {
        localWindowSize: [3, 2],
        causalAlignment: 'bottom_right',
        querySeqLengths: [24, 12],
        keyValueSeqLengths: [30, 7],
      },
    ],
    [
      'bias (B,N,T,S) + bottom-right causal T>S',
      { ...base, T: 40, S: 24 },
      { isCausal: true, causalAlignment: 'bottom_right' },
    ],
    [
      'T = S top-left and bottom-right agree',
      { ...base, T: 40 },
      { isCausal: true, causalAlignment: 'bottom_right' },
    ],
  ];
  for (const [name, shape, options] of extra) {
    it(name, () => {
      const made = inputs(shape, options);
      if (name.startsWith('bias')) {
        const bias = randomNormal([shape.B, shape.N, shape.T, shape.S], { seed: 14, dtype: 'bfloat16' });
        made.options = { ...options, bias };
      }
      checkComposite(made);
    });
  }

  it('float16, H=256, MQA', () =>
    checkComposite(inputs({ B: 1, T: 9, S: 17, N: 4, K: 1, H: 256 }, { isCausal: true }, 'float16')));
});

describe('cuDNN unified SDPA_FWD graph', () => {
  it('is chosen for plain and padded non-causal attention on 9.19, with K untransposed and a rank-1 scale', () => {
    const p = problem({ B: 2, T: 8, S: 12, N: 4, K: 2, H: 16 }, { keyValueSeqLengths: [12, 5] });
    const d = describeSdpa(p, H200);
    assert.ok(d.ok && d.features.graph === 'unified');
    const spec = buildSdpaGraph(d.features);
    assert.equal(spec.ops.length, 1);
    const op = spec.ops[0];
    assert.ok(
      op.kind === 'sdpa' && op.seqLenQ !== undefined && op.seqLenKv !== undefined && op.stats !== undefined,
    );
    const k = spec.tensors.find((t) => t.uid === op.k);
    assert.deepEqual(k?.dims, [2, 2, 12, 16]);
    assert.deepEqual(k?.strides, [12 * 2 * 16, 16, 2 * 16, 1]);
    assert.deepEqual(spec.tensors.find((t) => t.uid === op.scale)?.dims, [1]);
  });

  it('is not used on 9.14 with padding, nor with causal, bias or a window', () => {
    const padded = problem({ B: 2, T: 8, S: 12, N: 4, K: 2, H: 16 }, { keyValueSeqLengths: [12, 5] });
    const old = describeSdpa(padded, { ...H200, version: 91400 });
    assert.ok(old.ok && old.features.graph === 'composite');
    const causal = problem({ B: 1, T: 8, S: 8, N: 2, K: 2, H: 16 }, { isCausal: true });
    const forced = describeSdpa(causal, H200, { graph: 'unified' });
    assert.ok(!forced.ok && /unified SDPA op/.test(forced.reason));
  });
});
