import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { dotProductAttention } from '../../../src/api/attention.js';
import { validateAttention } from '../../../src/api/validate.js';
import { fp8Support } from '../../../src/backends/cuda/fp8/support.js';
import { autocast } from '../../../src/te/autocast.js';
import { describeFp8Path } from '../../../src/te/fp8-path.js';
import { fp8ReferenceAttention } from '../../../src/te/fp8-reference.js';
import { DotProductAttention, SequenceDescriptor } from '../../../src/te/module.js';
import { absMax, quantiseTensor } from '../../../src/te/quantise.js';
import { DelayedScaling, Float8CurrentScaling } from '../../../src/te/recipe.js';
import { decodeArray, roundTo } from '../../../src/tensor/dtype.js';
import { randomNormal } from '../../../src/tensor/random.js';
import { Tensor } from '../../../src/tensor/tensor.js';

const [B, T, N, H] = [2, 16, 2, 16];
const q = randomNormal([B, T, N, H], { seed: 21, dtype: 'bfloat16' });
const k = randomNormal([B, T, N, H], { seed: 22, dtype: 'bfloat16' });
const v = randomNormal([B, T, N, H], { seed: 23, dtype: 'bfloat16' });
const hopper = { major: 9, minor: 0 };

describe('FP8 reference', () => {
  test('equals float64 attention on the dequantised inputs, with P max and O max', () => {
    const [q8, k8, v8] = [quantiseTensor(q, 64), quantiseTensor(k, 64), quantiseTensor(v, 32)];
    const options = { isCausal: true, querySeqLengths: [16, 11], keyValueSeqLengths: [16, 13] };
    const ref = fp8ReferenceAttention(q8, k8, v8, options, 100);
    const deq = (x: typeof q8) =>
      Tensor.fromArray(
        decodeArray(x.tensor.data, x.tensor.dtype).map((c) => c * x.scaleInv),
        x.tensor.shape,
        'float64',
      );
    const expected = dotProductAttention(deq(q8), deq(k8), deq(v8), options).toFloat64Array();
    let err = 0;
    for (let i = 0; i < expected.length; i++) err = Math.max(err, Math.abs(expected[i] - ref.exact[i]));
    assert.ok(err < 1e-12, `max error ${err}`);
    assert.equal(ref.amaxO, absMax(expected));
    // Row 0 of a causal mask sees one key, so its weight is exactly 1.
    assert.equal(ref.amaxS, 1);
    const decoded = decodeArray(ref.output8.tensor.data, 'float8_e4m3fn');
    for (let i = 0; i < decoded.length; i += 37) {
      assert.equal(decoded[i], roundTo(Math.fround(expected[i] * 100), 'float8_e4m3fn', { saturate: true }));
    }
  });
});

describe('FP8 through the module (CPU emulation of the GPU path)', () => {
  test('delayed scaling: scale 1 first, then scales from the recorded amax, histories kept between calls', () => {
    const attn = new DotProductAttention({ headDim: H, numAttentionHeads: N });
    const recipe = new DelayedScaling({ amaxHistoryLen: 4, fp8Format: 'HYBRID' });
    const first = autocast({ recipe }, () => attn.apply(q, k, v));
    assert.equal(first.precision, 'fp8');
    assert.equal(first.backend, 'cpu-fp8-emulated');
    assert.deepEqual(first.fp8?.scales, { q: 1, k: 1, v: 1, s: 448, o: 1 });
    const amax = first.fp8!.amax;
    assert.equal(amax.q, absMax(q.toFloat64Array()));
    assert.equal(amax.s, 1); // causal row 0
    const second = autocast({ recipe }, () => attn.apply(q, k, v));
    const want = (a: number) => Math.fround(448 / a);
    assert.deepEqual(second.fp8?.scales, {
      q: want(amax.q),
      k: want(amax.k),
      v: want(amax.v),
      s: 448,
      o: Math.min(want(amax.o), want(amax.v)), // capped at scale_v: |O| ≤ max|V|
    });
    assert.equal(attn.fp8State.steps, 2);
    assert.deepEqual(Array.from(attn.fp8State.metas!.q.amaxHistory), [0, 0, amax.q, second.fp8!.amax.q]);
  });

  test('the FP8 output is close to the bf16 output once scales are calibrated', () => {
    const attn = new DotProductAttention({ headDim: H, numAttentionHeads: N, attnMaskType: 'no_mask' });
    const scope = autocast({ recipe: new DelayedScaling({ amaxHistoryLen: 16 }) });
    attn.forward(q, k, v, { autocast: scope });
    const fp8 = attn.apply(q, k, v, { autocast: scope, keepFp8Output: true });
    const bf16 = attn.forward(q, k, v);
    const [a, b] = [fp8.output.toFloat64Array(), bf16.toFloat64Array()];
    let err = 0;
    for (let i = 0; i < a.length; i++) err = Math.max(err, Math.abs(a[i] - b[i]));
    // e4m3 keeps 3 mantissa bits: rounding O costs up to 2^-4 of |O|max, and the quantised Q, K, V
    // (each within 2^-4 relative) add about as much again; measured 0.09 at |O|max 1.37.
    const bound = absMax(b) * 2 ** -3;
    assert.ok(err < bound, `fp8 vs bf16 max error ${err} ≥ ${bound}`);
    assert.ok(err > 0, 'an FP8 result identical to bf16 would mean nothing was quantised');
    const o8 = fp8.output8!;
    const decoded = decodeArray(o8.tensor.data, 'float8_e4m3fn');
    for (let i = 0; i < decoded.length; i += 17) {
      assert.equal(a[i], roundTo(Math.fround(decoded[i] * Math.fround(o8.scaleInv)), 'bfloat16'));
    }
  });

  test('current scaling uses this call’s amax; padding lengths apply on the FP8 path too', () => {
    const attn = new DotProductAttention({
      headDim: H,
      numAttentionHeads: N,
      attnMaskType: 'padding_causal',
    });
    const sequenceDescriptor = SequenceDescriptor.fromSeqLens([16, 9]);
    const r = autocast({ recipe: new Float8CurrentScaling() }, () =>
      attn.apply(q, k, v, { sequenceDescriptor }),
    );
    const vMax = absMax(v.toFloat64Array());
    assert.equal(r.fp8?.scales.v, Math.fround(448 / vMax));
    assert.equal(r.fp8?.scales.o, Math.fround(448 / vMax));
    assert.equal(r.fp8?.scales.s, 448);
    const out = r.output.toFloat64Array();
    const padded = out.subarray((1 * T + 9) * N * H, 2 * T * N * H);
    assert.ok(
      padded.every((x) => x === 0),
      'rows past the query length are zeros',
    );
    assert.equal(attn.fp8State.metas, null, 'current scaling keeps no history');
  });

  test('the emulation refuses what the GPU path would (a bias here), and falls back when asked', () => {
    const attn = new DotProductAttention({
      headDim: H,
      numAttentionHeads: N,
      attnBiasType: 'post_scale_bias',
    });
    const bias = Tensor.zeros([1, N, T, T], 'bfloat16');
    assert.throws(
      () => autocast({}, () => attn.forward(q, k, v, { bias })),
      (e: unknown) => e instanceof Error && /takes no bias/.test(e.message) && /quantise Q/.test(e.message),
    );
    const r = autocast({ fallback: true }, () => attn.apply(q, k, v, { bias }));
    assert.equal(r.precision, 'bf16');
    assert.match(r.fallbackReason ?? '', /no bias/);
  });

  test('autocast disabled runs the bf16 path', () => {
    const attn = new DotProductAttention({ headDim: H, numAttentionHeads: N });
    const r = autocast({ enabled: false }, () => attn.apply(q, k, v));
    assert.equal(r.precision, 'bf16');
  });
});

describe('FP8 support on the GPU, and what the error shows', () => {
  const problem = (options = {}, h = H, qq = q, kk = k) => {
    const shape = [B, T, N, h];
    const pick = (t: Tensor) => (h === H ? t : randomNormal(shape, { seed: 5, dtype: 'bfloat16' }));
    return validateAttention(pick(qq), pick(kk), pick(v), options);
  };
  test('supported: causal and padded on sm_90; sm_100 too', () => {
    assert.ok(fp8Support(problem({ isCausal: true }), hopper).ok);
    assert.ok(fp8Support(problem({ querySeqLengths: [3, 4] }), { major: 10, minor: 0 }).ok);
    assert.ok(
      fp8Support(problem({ isCausal: true, causalAlignment: 'bottom_right' }), hopper).ok,
      'T = S: same diagonal',
    );
  });
  const reasons: [string, () => ReturnType<typeof fp8Support>, RegExp][] = [
    ['no GPU', () => fp8Support(problem(), null), /no CUDA device/],
    ['Ada', () => fp8Support(problem(), { major: 8, minor: 9 }), /compute capability 9\.0 \(Hopper\).*sm_89/],
    ['H=72', () => fp8Support(problem({}, 72), hopper), /multiple of 16 and at most 256; got H=72/],
    ['bias', () => fp8Support(problem({ bias: Tensor.zeros([1, N, T, T], 'bfloat16') }), hopper), /no bias/],
    ['window', () => fp8Support(problem({ localWindowSize: [4, 0] }), hopper), /sliding window/],
    [
      'bottom-right with padding',
      () =>
        fp8Support(
          problem({ isCausal: true, causalAlignment: 'bottom_right', querySeqLengths: [4, 5] }),
          hopper,
        ),
      /bottom-right causal/,
    ],
    [
      'float32',
      () =>
        fp8Support(
          validateAttention(
            randomNormal([1, 4, 1, 16], { seed: 1 }),
            randomNormal([1, 4, 1, 16], { seed: 2 }),
            randomNormal([1, 4, 1, 16], { seed: 3 }),
          ),
          hopper,
        ),
      /bfloat16 inputs.*float32/,
    ],
  ];
  for (const [name, run, pattern] of reasons) {
    test(`unsupported: ${name}`, () => {
      const s = run();
      assert.equal(s.ok, false);
      assert.match((s as { reason: string }).reason, pattern);
    });
  }
  test('the FP8 path description names the recipe, the shapes and the three steps', () => {
    const text = describeFp8Path(problem({ isCausal: true }), new DelayedScaling({ amaxHistoryLen: 1024 }));
    assert.match(text, /DelayedScaling\(margin=0, HYBRID, amaxHistoryLen=1024, 'max'\)/);
    assert.match(text, /B=2,T=16,N=2,H=16/);
    assert.match(text, /cuDNN FP8 SDPA graph.*causal/);
    assert.match(text, /dequantise O8 to bfloat16/);
  });
});
