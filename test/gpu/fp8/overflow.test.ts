/**
 * cuDNN's FP8 backward with an upstream gradient past e4m3's 448 at scale 1: the module's result lists the
 * overflow (dO, and the gradients built from it) rather than handing back NaN or clipped gradients unsaid.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { cudaAvailable, getCudaContext } from '../../../src/backends/cuda/runtime/context.js';
import { autocast } from '../../../src/te/autocast.js';
import { DotProductAttention } from '../../../src/te/module.js';
import { DelayedScaling } from '../../../src/te/recipe.js';
import { randomNormal } from '../../../src/tensor/random.js';
import { Tensor } from '../../../src/tensor/tensor.js';

const cuda = cudaAvailable();
const sm90 = cuda.ok && getCudaContext().properties.computeCapability.major >= 9;
const skip = !cuda.ok ? `no CUDA device: ${cuda.reason}` : sm90 ? false : 'FP8 attention needs sm_90';

describe('FP8 backward overflow on cuDNN', { skip }, () => {
  it('dO at 60000 under E4M3 is reported as overflow with its amax, scale and limit', () => {
    const [B, T, N, K, H] = [1, 64, 2, 2, 128];
    const on = (t: Tensor) => t.to('cuda');
    const q = on(randomNormal([B, T, N, H], { seed: 1, dtype: 'bfloat16' }));
    const k = on(randomNormal([B, T, K, H], { seed: 2, dtype: 'bfloat16' }));
    const v = on(randomNormal([B, T, K, H], { seed: 3, dtype: 'bfloat16' }));
    const dO = on(Tensor.fromArray(new Float64Array(B * T * N * H).fill(60000), [B, T, N, H], 'bfloat16'));
    const attn = new DotProductAttention({ headDim: H, numAttentionHeads: N, numGqaGroups: K });
    const g = autocast({ recipe: new DelayedScaling({ fp8Format: 'E4M3' }) }, () =>
      attn.backward(q, k, v, dO),
    );
    assert.equal(g.backend, 'cudnn-fp8');
    const overflow = g.fp8?.overflow ?? [];
    const dv = g.dValue.toFloat64Array();
    const nan = dv.filter(Number.isNaN).length;
    console.log(`# overflow: ${overflow.join(' | ')}; dValue NaN ${nan} of ${dv.length}`);
    assert.ok(
      overflow.some((o) => o.startsWith('dO: amax 5.990e+4 × scale 1.000')),
      overflow.join(' | '),
    );
  });
});
