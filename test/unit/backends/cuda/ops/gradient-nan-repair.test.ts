/**
 * Which problems the gradient NaN repair applies to (ops/gradient-nan-repair.ts), without a GPU: every
 * problem cuDNN's backward takes (16-bit, dense, H and Hv ≤ 256, a bias in the inputs' dtype), and
 * the reasons for the rest; and the cudnn backward's registry entry declaring it.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { validateBackward } from '../../../../../src/api/validate-backward.js';
import type { BackwardOptions } from '../../../../../src/backends/backward-problem.js';
import { BACKWARD_BACKENDS } from '../../../../../src/backends/backward-registry.js';
import {
  gradientNanRepair,
  gradientRepairSupport,
  withGradientNanRepair,
} from '../../../../../src/backends/cuda/ops/gradient-nan-repair.js';
import type { FloatDType } from '../../../../../src/tensor/dtype.js';
import { Tensor } from '../../../../../src/tensor/tensor.js';

function problem(dtype: FloatDType, H = 64, options: BackwardOptions = {}, outputDType: FloatDType = dtype) {
  const [B, T, S, N, K] = [2, 8, 9, 4, 2];
  const q = Tensor.zeros([B, T, N, H], dtype);
  const kv = Tensor.zeros([B, S, K, H], dtype);
  const o = Tensor.zeros([B, T, N, H], outputDType);
  const lse = Tensor.zeros([B, T, N], 'float32');
  return validateBackward(q, kv, kv, o, lse, Tensor.zeros([B, T, N, H], dtype), options);
}

describe('gradient NaN repair: where it applies', () => {
  it("every problem of cuDNN's backward: 16-bit, H up to 256, a bias of the inputs' dtype, lengths, causal", () => {
    for (const dtype of ['bfloat16', 'float16'] as const)
      for (const H of [8, 64, 128, 256]) {
        const bias = Tensor.zeros([1, 4, 8, 9], dtype);
        const options = { bias, isCausal: true, keyValueSeqLengths: [9, 3], querySeqLengths: [8, 2] };
        assert.deepEqual(gradientRepairSupport(problem(dtype, H, options)), { ok: true }, `${dtype} H=${H}`);
        assert.equal(gradientNanRepair.applies(problem(dtype, H, options)), true);
      }
    // float32 inputs, and a float32 output beside 16-bit inputs (D from the unrounded output), too.
    assert.equal(gradientNanRepair.applies(problem('float32')), true);
    assert.equal(gradientNanRepair.applies(problem('bfloat16', 64, {}, 'float32')), true);
  });

  it('not what its kernel cannot read, each with the reason', () => {
    const cases: [string, ReturnType<typeof problem>, RegExp][] = [
      ['float64', problem('float64'), /16-bit or float32 inputs, got float64/],
      ['H=264', problem('bfloat16', 264), /head dims up to 256, got H=264/],
      [
        'a float32 bias beside bf16 inputs',
        problem('bfloat16', 64, { bias: Tensor.zeros([1, 4, 8, 9], 'float32') }),
        /dBias in the inputs' dtype, the bias is float32/,
      ],
    ];
    for (const [name, p, reason] of cases) {
      const support = gradientRepairSupport(p);
      assert.ok(!support.ok && reason.test(support.reason), `${name}: ${JSON.stringify(support)}`);
      assert.equal(gradientNanRepair.applies(p), false, name);
    }
  });

  it("is the cudnn backward's post-op in the table, after any it declares", () => {
    const cudnn = BACKWARD_BACKENDS.find((b) => b.name === 'cudnn' && b.device === 'cuda');
    assert.ok(cudnn);
    assert.deepEqual(
      cudnn.postOps?.map((op) => op.name),
      ['gradient-nan-repair'],
    );
    for (const b of BACKWARD_BACKENDS.filter((x) => x.name !== 'cudnn'))
      assert.equal(b.postOps, undefined, b.name);
    const first = { name: 'first', applies: () => true, run: () => {} };
    const wrapped = withGradientNanRepair({ ...cudnn, postOps: [first] });
    assert.deepEqual(
      wrapped.postOps?.map((op) => op.name),
      ['first', 'gradient-nan-repair'],
    );
  });
});
