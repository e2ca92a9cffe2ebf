/**
 * The module's FP8 backward on the CPU (the emulation of cuDNN's FP8 backward graph, under Hopper's
 * rules): gradients against the float64 reference within the FP8 tolerance, the backward's scale
 * bookkeeping (TE's delayed scaling over dO, dP, dQ, dK, dV with e5m2's 57344 under HYBRID, e4m3's
 * 448 under E4M3), and the refusals with their reasons.
 *
 * The tolerance, relative Frobenius error ‖g − ref‖ / ‖ref‖ ≤ 0.2 per gradient: rounding to e5m2
 * (2 mantissa bits, ulp = 2^-2 of the binade's bottom) alone leaves an rms relative error of about
 * 2^-2/√12 · 0.72 ≈ 5% per element; dO8 and dS8 are e5m2 too (≈ 5% each, reduced by the sums they
 * enter), and Q8, K8, V8, O8, P8 are e4m3 (≈ 2.6% each). In quadrature ≈ 10%; the bound is twice that.
 * bf16 gradients of the same inputs sit near 0.3%.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { attention } from '../../../src/api/attention.js';
import { attentionBackward } from '../../../src/api/backward.js';
import { InvalidArgumentError, UnsupportedError } from '../../../src/errors.js';
import { autocast } from '../../../src/te/autocast.js';
import { DotProductAttention, SequenceDescriptor } from '../../../src/te/module.js';
import { absMax } from '../../../src/te/quantise.js';
import { DelayedScaling, Float8CurrentScaling } from '../../../src/te/recipe.js';
import { randomNormal } from '../../../src/tensor/random.js';
import type { Tensor } from '../../../src/tensor/tensor.js';

const [B, T, N, K, H] = [2, 24, 4, 2, 128];
const q = randomNormal([B, T, N, H], { seed: 11, dtype: 'bfloat16' });
const k = randomNormal([B, T, K, H], { seed: 12, dtype: 'bfloat16' });
const v = randomNormal([B, T, K, H], { seed: 13, dtype: 'bfloat16' });
const dO = randomNormal([B, T, N, H], { seed: 14, dtype: 'bfloat16' });
const config = { headDim: H, numAttentionHeads: N, numGqaGroups: K };

function relativeError(got: Tensor, want: Tensor): number {
  const [a, b] = [got.toFloat64Array(), want.toFloat64Array()];
  let [err, norm] = [0, 0];
  for (let i = 0; i < a.length; i++) {
    err += (a[i] - b[i]) ** 2;
    norm += b[i] ** 2;
  }
  return Math.sqrt(err / norm);
}

function reference(options: Parameters<typeof attention>[3] = { isCausal: true }) {
  const f = attention(q, k, v, { ...options, implementation: 'reference', returnLogSumExp: true });
  return attentionBackward(q, k, v, f.output, f.logSumExp!, dO, { ...options, implementation: 'reference' });
}

describe('te.DotProductAttention FP8 backward (CPU emulation of cuDNN’s graph)', () => {
  test('HYBRID: e5m2 gradients within the FP8 tolerance of float64, amax and scales as TE records them', () => {
    const attn = new DotProductAttention(config);
    const recipe = new DelayedScaling({ fp8Format: 'HYBRID', amaxHistoryLen: 4 });
    const want = reference();
    const first = autocast({ recipe }, () => attn.backward(q, k, v, dO));
    // TE's first backward quantises with scale 1; its amax values then set 57344 / amax.
    assert.deepEqual(first.fp8?.scales, { dO: 1, dP: 1, dQ: 1, dK: 1, dV: 1 });
    const amax1 = first.fp8!.amax;
    assert.equal(amax1.dO, absMax(dO.toFloat64Array()));
    for (const [name, g] of [
      ['dQ', want.dQuery],
      ['dK', want.dKey],
      ['dV', want.dValue],
    ] as const) {
      const exact = absMax(g.toFloat64Array());
      assert.ok(Math.abs(amax1[name] - exact) <= 0.25 * exact, `amax_${name} ${amax1[name]} vs ${exact}`);
    }
    assert.ok(amax1.dP > 0 && amax1.dP < 1, `amax_dP ${amax1.dP}`);
    const second = autocast({ recipe }, () => attn.backward(q, k, v, dO));
    assert.equal(second.precision, 'fp8');
    assert.equal(second.backend, 'cpu-fp8-emulated');
    assert.match(
      second.variant,
      /cpu-fp8-emulated-float8_e4m3fn-causal \+ cpu-fp8-emulated-backward-float8_e5m2/,
    );
    for (const name of ['dO', 'dP', 'dQ', 'dK', 'dV'] as const) {
      assert.equal(second.fp8!.scales[name], Math.fround(57344 / amax1[name]), `scale_${name}`);
    }
    assert.equal(second.fp8!.gradients8.dQuery.dtype, 'float8_e5m2');
    assert.deepEqual(second.dKey.shape, [B, T, K, H]);
    assert.equal(second.dQuery.dtype, 'bfloat16');
    const errors = {
      dQ: relativeError(second.dQuery, want.dQuery),
      dK: relativeError(second.dKey, want.dKey),
      dV: relativeError(second.dValue, want.dValue),
    };
    for (const [name, e] of Object.entries(errors)) assert.ok(e <= 0.2, `${name}: relative error ${e}`);
    // Quantisation shows: FP8 gradients are not bf16 gradients.
    assert.ok(errors.dQ > 0.01, `dQ relative error ${errors.dQ} is below FP8 rounding`);
    const metas = attn.fp8State.gradientMetas!;
    assert.equal(attn.fp8State.backwardSteps, 2);
    assert.deepEqual(Array.from(metas.dQ.amaxHistory).slice(-2), [amax1.dQ, second.fp8!.amax.dQ]);
    assert.equal(attn.fp8State.steps, 2, 'each backward ran one FP8 forward step');
    attn.fp8State.reset();
    assert.equal(attn.fp8State.gradientMetas, null);
  });

  test('E4M3: e4m3 gradients with 448 / amax scales; padding and MHA', () => {
    const attn = new DotProductAttention({ ...config, numGqaGroups: N, attnMaskType: 'padding' });
    const recipe = new DelayedScaling({ fp8Format: 'E4M3', amaxHistoryLen: 2 });
    const kv = randomNormal([B, T, N, H], { seed: 15, dtype: 'bfloat16' });
    const sequenceDescriptor = SequenceDescriptor.fromSeqLens([24, 13]);
    const run = () => autocast({ recipe }, () => attn.backward(q, kv, kv, dO, { sequenceDescriptor }));
    const first = run();
    const second = run();
    assert.equal(second.fp8!.gradients8.dKey.dtype, 'float8_e4m3fn');
    assert.equal(second.fp8!.scales.dV, Math.fround(448 / first.fp8!.amax.dV));
    const lengths = { querySeqLengths: [24, 13], keyValueSeqLengths: [24, 13] };
    const f = attention(q, kv, kv, { ...lengths, implementation: 'reference', returnLogSumExp: true });
    const want = attentionBackward(q, kv, kv, f.output, f.logSumExp!, dO, {
      ...lengths,
      implementation: 'reference',
    });
    for (const name of ['dQuery', 'dKey', 'dValue'] as const) {
      const e = relativeError(second[name], want[name]);
      assert.ok(e <= 0.2, `${name}: relative error ${e}`);
    }
    // Padded rows and keys get zero gradients.
    const dq = second.dQuery.toFloat64Array();
    assert.ok(
      dq.slice((T + 13) * N * H).every((x) => x === 0),
      'dQ rows past seq_q are zero',
    );
  });

  test('refuses what cuDNN’s FP8 backward cannot run, with the reason; fallback runs bf16', () => {
    const small = new DotProductAttention({ headDim: 64, numAttentionHeads: N, numGqaGroups: K });
    const q64 = randomNormal([1, 16, N, 64], { seed: 1, dtype: 'bfloat16' });
    const kv64 = randomNormal([1, 16, K, 64], { seed: 2, dtype: 'bfloat16' });
    const dO64 = randomNormal([1, 16, N, 64], { seed: 3, dtype: 'bfloat16' });
    const recipe = new DelayedScaling();
    const refused = (f: () => unknown, reason: RegExp) =>
      assert.throws(f, (e: unknown) => e instanceof UnsupportedError && reason.test(e.reason));
    refused(
      () => autocast({ recipe }, () => small.backward(q64, kv64, kv64, dO64)),
      /H = Hv = 128; got H=64/,
    );
    const current = new Float8CurrentScaling();
    const attn = new DotProductAttention(config);
    refused(() => autocast({ recipe: current }, () => attn.backward(q, k, v, dO)), /takes DelayedScaling/);
    const g = autocast({ recipe: current, fallback: true }, () => attn.backward(q, k, v, dO));
    assert.equal(g.precision, 'bf16');
    assert.match(g.fallbackReason ?? '', /DelayedScaling/);
    assert.throws(
      () => autocast({ recipe }, () => attn.backward(q, k, v, q.reshape([B, T, N * H]))),
      (e: unknown) => e instanceof InvalidArgumentError && /dOutput/.test(e.message),
    );
  });
});
