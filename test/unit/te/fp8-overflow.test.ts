/**
 * An FP8 backward whose tensors pass the format at the step's scale says so: an upstream gradient at or past
 * e4m3's limit saturates dV's codes (NaN on cuDNN), and the gradients are clipped, not what was asked.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { autocast } from '../../../src/te/autocast.js';
import { DotProductAttention } from '../../../src/te/module.js';
import { DelayedScaling } from '../../../src/te/recipe.js';
import { randomNormal } from '../../../src/tensor/random.js';
import { Tensor } from '../../../src/tensor/tensor.js';

const [B, T, N, K, H] = [1, 16, 2, 2, 128];
const q = randomNormal([B, T, N, H], { seed: 11, dtype: 'bfloat16' });
const k = randomNormal([B, T, K, H], { seed: 12, dtype: 'bfloat16' });
const v = randomNormal([B, T, K, H], { seed: 13, dtype: 'bfloat16' });
const filled = (x: number) =>
  Tensor.fromArray(new Float64Array(B * T * N * H).fill(x), [B, T, N, H], 'bfloat16');

describe('FP8 backward overflow', () => {
  test('an upstream gradient past e4m3’s 448 is reported as overflow, with the amax, scale and limit', () => {
    const attn = new DotProductAttention({ headDim: H, numAttentionHeads: N, numGqaGroups: K });
    const recipe = new DelayedScaling({ fp8Format: 'E4M3' });
    const g = autocast({ recipe }, () => attn.backward(q, k, v, filled(60000)));
    const overflow = g.fp8?.overflow ?? [];
    assert.ok(
      overflow.some((o) => /^dO: amax 5\.990e\+4 × scale 1\.000 passes float8_e4m3fn's 448$/.test(o)),
      overflow.join(' | '),
    );
    assert.ok(
      overflow.some((o) => o.startsWith('dV: ')),
      overflow.join(' | '),
    );
  });

  test('a gradient well inside the format reports none', () => {
    const attn = new DotProductAttention({ headDim: H, numAttentionHeads: N, numGqaGroups: K });
    const recipe = new DelayedScaling({ fp8Format: 'HYBRID' });
    const g = autocast({ recipe }, () => attn.backward(q, k, v, filled(1)));
    assert.deepEqual(g.fp8?.overflow, []);
  });
});
