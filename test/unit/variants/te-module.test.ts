/**
 * The TE-style module takes scoreMod, maskMod and blockMask per call, forward and backward (with the
 * learned captures' gradients), and its FP8 path refuses them with the reason.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { attention } from '../../../src/api/attention.js';
import { attentionVjp } from '../../../src/api/backward.js';
import { UnsupportedError } from '../../../src/errors.js';
import { autocast } from '../../../src/te/autocast.js';
import { DotProductAttention } from '../../../src/te/module.js';
import { DelayedScaling } from '../../../src/te/recipe.js';
import { randomNormal } from '../../../src/tensor/random.js';
import { Tensor } from '../../../src/tensor/tensor.js';
import { and, causal, documentMask, relativeBias } from '../../../src/variants/library.js';

const [B, T, N, K, H] = [2, 16, 4, 2, 16];
const q = randomNormal([B, T, N, H], { seed: 31, dtype: 'float64' });
const k = randomNormal([B, T, K, H], { seed: 32, dtype: 'float64' });
const v = randomNormal([B, T, K, H], { seed: 33, dtype: 'float64' });
const dOut = randomNormal([B, T, N, H], { seed: 34, dtype: 'float64' });
const docIds = Tensor.fromArray(
  Array.from({ length: B * T }, (_, i) => Math.floor((i % T) / 6)),
  [B, T],
  'int32',
);
const table = Tensor.fromArray(
  Array.from({ length: N * 5 }, (_, i) => Math.sin(i) / 2),
  [N, 5],
  'float32',
);
const module = new DotProductAttention({
  headDim: H,
  numAttentionHeads: N,
  numGqaGroups: K,
  attnMaskType: 'no_mask',
});

describe('te DotProductAttention with modifiers', () => {
  const options = { maskMod: and(documentMask(docIds), causal()), scoreMod: relativeBias(table) };
  it('forward equals attention() with the same modifiers', () => {
    const got = module.forward(q, k, v, options).toFloat64Array();
    const want = attention(q, k, v, { ...options, scale: 1 / Math.sqrt(H) }).output.toFloat64Array();
    for (let i = 0; i < want.length; i++) assert.ok(Math.abs(got[i] - want[i]) < 1e-12);
  });
  it('backward returns dCaptures of the learned table, as attentionVjp does', () => {
    const got = module.backward(q, k, v, dOut, options);
    const want = attentionVjp(q, k, v, options).backward(dOut);
    assert.ok(got.dCaptures?.table && want.dCaptures?.table);
    assert.deepEqual(
      Array.from(got.dCaptures.table.toFloat64Array()),
      Array.from(want.dCaptures.table.toFloat64Array()),
    );
    assert.deepEqual(Array.from(got.dQuery.toFloat64Array()), Array.from(want.dQuery.toFloat64Array()));
  });
  it('the FP8 path refuses modifiers, saying so', () => {
    const bf = (t: Tensor) => t.astype('bfloat16');
    assert.throws(
      () => autocast({ recipe: new DelayedScaling() }, () => module.forward(bf(q), bf(k), bf(v), options)),
      (e: unknown) => e instanceof UnsupportedError && /modifiers/.test(e.message),
    );
  });
});
