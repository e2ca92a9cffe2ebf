/**
 * The TE-style module's backward on the CPU: the gradients attentionBackward gives for the options
 * the module maps its own to (causal by default, GQA), and the refusals with their reasons (an FP8
 * backward cuDNN cannot run, packed layouts). The FP8 backward itself: te-fp8-backward.test.ts.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { attention } from '../../../src/api/attention.js';
import { attentionBackward } from '../../../src/api/backward.js';
import { UnsupportedError } from '../../../src/errors.js';
import { autocast } from '../../../src/te/autocast.js';
import { DotProductAttention } from '../../../src/te/module.js';
import { DelayedScaling } from '../../../src/te/recipe.js';
import { randomNormal } from '../../../src/tensor/random.js';

const [B, T, N, K, H] = [2, 12, 4, 2, 16];
const q = randomNormal([B, T, N, H], { seed: 1, dtype: 'bfloat16' });
const k = randomNormal([B, T, K, H], { seed: 2, dtype: 'bfloat16' });
const v = randomNormal([B, T, K, H], { seed: 3, dtype: 'bfloat16' });
const dO = randomNormal([B, T, N, H], { seed: 4, dtype: 'bfloat16' });
const config = { headDim: H, numAttentionHeads: N, numGqaGroups: K };

describe('te.DotProductAttention backward', () => {
  test('gives the gradients of its forward (causal by default, GQA summed)', () => {
    const got = new DotProductAttention(config).backward(q, k, v, dO);
    const f = attention(q, k, v, { isCausal: true, returnLogSumExp: true });
    const want = attentionBackward(q, k, v, f.output, f.logSumExp!, dO, { isCausal: true });
    for (const name of ['dQuery', 'dKey', 'dValue'] as const) {
      assert.deepEqual([...got[name].toFloat64Array()], [...want[name].toFloat64Array()], name);
    }
    assert.deepEqual(got.dKey.shape, [B, T, K, H]);
    assert.equal(got.dQuery.dtype, 'bfloat16');
  });

  test('refuses an FP8 backward it cannot run (H ≠ 128) with the reason, and runs bf16 with fallback', () => {
    const attn = new DotProductAttention(config);
    const recipe = new DelayedScaling({ fp8Format: 'HYBRID' });
    assert.throws(
      () => autocast({ enabled: true, recipe }, () => attn.backward(q, k, v, dO)),
      (e: unknown) =>
        e instanceof UnsupportedError &&
        /H = Hv = 128; got H=16/.test(e.reason) &&
        /fallback: true/.test(e.reason),
    );
    const g = autocast({ enabled: true, recipe, fallback: true }, () => attn.backward(q, k, v, dO));
    assert.match(g.fallbackReason ?? '', /H = Hv = 128/);
    assert.equal(g.precision, 'bf16');
  });

  test('refuses packed layouts with the layout named', () => {
    const attn = new DotProductAttention({ ...config, numGqaGroups: N, qkvLayout: 'bs3hd' });
    assert.throws(
      () => attn.backward(q, q, q, dO),
      (e: unknown) => e instanceof UnsupportedError && /bs3hd/.test(e.reason),
    );
  });
});
