/**
 * The backward on the webgpu backend (on a software adapter here; on the GPU machine's Vulkan
 * driver there): every case of the forward's matrix and the gradient cases, float32 and float16,
 * through attentionVjp on webgpu tensors, judged by the backward accuracy rule against the float64
 * reference; the NaN rule for gradients; GQA sums, dBias in the bias's shape and dtype, and the
 * refusals. Skips, saying why, where no WebGPU device opens.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { attention } from '../../../../src/api/attention.js';
import { attentionBackward, attentionVjp } from '../../../../src/api/backward.js';
import { validateAttention } from '../../../../src/api/validate.js';
import { validateBackward } from '../../../../src/api/validate-backward.js';
import type { AttentionGradients } from '../../../../src/backends/backward-problem.js';
import type { AttentionOptions } from '../../../../src/backends/problem.js';
import { planBackward } from '../../../../src/backends/webgpu/backward-plan.js';
import { MODIFIERS_REASON, planForward } from '../../../../src/backends/webgpu/plan.js';
import { webgpuContext } from '../../../../src/backends/webgpu/runtime.js';
import { buildInputs, CASES } from '../../../../src/check/cases.js';
import { GRADIENT_CASES } from '../../../../src/check/gradient-cases.js';
import {
  compareGradientNan,
  GRADIENT_NAN_CASES,
  gradientNanInputs,
} from '../../../../src/check/gradient-nan.js';
import {
  type BackwardInputs,
  checkGradients,
  type GradientValues,
  plainLowPrecisionGradients,
  randomOutputGradient,
  referenceGradients,
} from '../../../../src/check/gradients.js';
import { UnsupportedError } from '../../../../src/errors.js';
import type { FloatDType } from '../../../../src/tensor/dtype.js';
import { randomNormal } from '../../../../src/tensor/random.js';
import type { Tensor } from '../../../../src/tensor/tensor.js';
import { webgpuSkipReason } from '../../../support/webgpu.js';

const skip = await webgpuSkipReason();

/** The inputs and options moved to the device (bias and mask included). */
function onDevice(inputs: BackwardInputs) {
  const { q, k, v, options, dO } = inputs;
  const device: AttentionOptions = { ...options };
  if (options.bias) device.bias = options.bias.to('webgpu');
  if (options.mask) device.mask = options.mask.to('webgpu');
  const tensors = [q, k, v, dO].map((t) => t.to('webgpu'));
  return { tensors, options: device };
}

async function readGradients(g: AttentionGradients): Promise<GradientValues> {
  const values: GradientValues = {
    dQuery: await g.dQuery.toFloat64ArrayAsync(),
    dKey: await g.dKey.toFloat64ArrayAsync(),
    dValue: await g.dValue.toFloat64ArrayAsync(),
  };
  if (g.dBias) values.dBias = await g.dBias.toFloat64ArrayAsync();
  for (const t of [g.dQuery, g.dKey, g.dValue, g.dBias]) t?.dispose();
  return values;
}

/**
 * The gradients on the device: through attentionVjp (the webgpu forward, then the pullback), or
 * through attentionBackward with the residuals of the CPU forward uploaded ('residuals': each
 * forward variant costs SwiftShader 5–20 s to compile, and the forward has its own suite).
 */
async function webgpuGradients(inputs: BackwardInputs, via: 'vjp' | 'residuals' = 'vjp') {
  const { tensors, options } = onDevice(inputs);
  const [q, k, v, dO] = tensors;
  let residuals: Tensor[];
  if (via === 'vjp') {
    const f = attentionVjp(q, k, v, { ...options, implementation: 'webgpu' });
    residuals = [f.output, f.logSumExp];
  } else {
    const f = attention(inputs.q, inputs.k, inputs.v, {
      ...inputs.options,
      implementation: 'flash',
      returnLogSumExp: true,
    });
    residuals = [f.output.to('webgpu'), (f.logSumExp as Tensor).to('webgpu')];
  }
  const g = attentionBackward(q, k, v, residuals[0], residuals[1], dO, {
    ...options,
    implementation: 'webgpu',
  });
  const values = await readGradients(g);
  for (const t of [...tensors, ...residuals, options.bias, options.mask] as (Tensor | undefined)[])
    t?.dispose();
  return { values, backend: g.backend, variant: g.variant };
}

/**
 * float16 on every case; float32 on three that cover GQA, bias, causality and padding, so that each
 * of scripts/webgpu-gpu.sh's two backward stages stays within its 55 s (the NaN rule runs in float32).
 */
const FLOAT32_CASES = new Set([
  'GQA N=8 K=2',
  'bias full (B,N,T,S) + causal',
  'padding + causal bottom-right + GQA',
]);

for (const dtype of ['float16', 'float32'] as FloatDType[]) {
  describe(`webgpu backward suite, ${dtype}`, { skip: skip ?? false }, () => {
    [...CASES, ...GRADIENT_CASES].forEach((c, index) => {
      if (dtype === 'float32' && !FLOAT32_CASES.has(c.name)) return;
      it(`${c.name} · ${dtype}`, async () => {
        const seed = 100 + 10 * index;
        const { q, k, v, options } = buildInputs(c, dtype, seed);
        const dO = randomOutputGradient(q, v, dtype, seed + 7);
        const inputs = { q, k, v, options, dO };
        const { values, backend, variant } = await webgpuGradients(inputs, 'residuals');
        assert.equal(backend, 'webgpu');
        assert.match(variant, new RegExp(`^webgpu-backward-rows-${dtype}-`));
        const reference = referenceGradients(inputs);
        const reports = checkGradients(values, reference, plainLowPrecisionGradients(inputs, dtype), dtype);
        assert.equal(reports.length, options.bias ? 4 : 3);
        for (const r of reports) assert.ok(r.ok, r.message);
      });
    });
  });
}

describe('webgpu backward NaN rule, float32', { skip: skip ?? false }, () => {
  GRADIENT_NAN_CASES.forEach((c, index) => {
    it(c.name, async () => {
      const inputs = gradientNanInputs(c, 'float32', 300 + 10 * index);
      const { values } = await webgpuGradients(inputs);
      const r = compareGradientNan(values, referenceGradients(inputs), 'float32');
      assert.ok(r.ok, r.message);
    });
  });
});

describe('webgpu backward: gradients, shapes and refusals', { skip: skip ?? false }, () => {
  it('dBias comes in the bias shape and dtype; attentionBackward takes explicit residuals', async () => {
    const q = randomNormal([1, 24, 4, 32], { seed: 1, dtype: 'bfloat16' });
    const k = randomNormal([1, 40, 2, 32], { seed: 2, dtype: 'bfloat16' });
    const v = randomNormal([1, 40, 2, 32], { seed: 3, dtype: 'bfloat16' });
    const bias = randomNormal([1, 4, 1, 40], { seed: 4, dtype: 'float32' });
    const dO = randomOutputGradient(q, v, 'bfloat16', 5);
    const inputs = {
      q,
      k,
      v,
      options: { bias, isCausal: true, causalAlignment: 'bottom_right' as const },
      dO,
    };
    const { tensors, options } = onDevice(inputs);
    const [gq, gk, gv, gdO] = tensors;
    const f = attentionVjp(gq, gk, gv, options);
    const g = attentionBackward(gq, gk, gv, f.output, f.logSumExp, gdO, options);
    assert.deepEqual(
      [g.dKey.shape, g.dKey.dtype, g.dBias?.shape, g.dBias?.dtype],
      [[1, 40, 2, 32], 'bfloat16', [1, 4, 1, 40], 'float32'],
    );
    assert.equal(g.dQuery.device, 'webgpu');
    const reports = checkGradients(
      await readGradients(g),
      referenceGradients(inputs),
      plainLowPrecisionGradients(inputs, 'bfloat16'),
      'bfloat16',
    );
    for (const r of reports) assert.ok(r.ok, r.message);
  });

  it('float32Output: D from the forward rerun in float32 on the device', async () => {
    const q = randomNormal([1, 40, 2, 16], { seed: 11, dtype: 'float16' });
    const dO = randomOutputGradient(q, q, 'float16', 12);
    const inputs = { q, k: q, v: q, options: { isCausal: true }, dO };
    const [gq, gdO] = [q, dO].map((t) => t.to('webgpu'));
    const f = attentionVjp(gq, gq, gq, { isCausal: true, float32Output: true });
    assert.equal(f.float32Output?.dtype, 'float32');
    assert.equal(f.float32Output?.device, 'webgpu');
    const g = f.backward(gdO);
    assert.match(g.variant, /-o-float32/);
    const reports = checkGradients(
      await readGradients(g),
      referenceGradients(inputs),
      plainLowPrecisionGradients(inputs, 'float16'),
      'float16',
    );
    for (const r of reports) assert.ok(r.ok, r.message);
    for (const t of [gq, gdO, f.output, f.logSumExp, f.float32Output]) t?.dispose();
  });

  it('refuses score/mask modifiers forward and backward, with the reason', () => {
    const q = randomNormal([1, 24, 2, 16], { seed: 1, dtype: 'float32' }).to('webgpu');
    const modifiers = [{ scoreMod: 'score * 2' }, { maskMod: 'kv <= q' }];
    for (const options of modifiers) {
      const refused = (e: unknown) =>
        e instanceof UnsupportedError && /modifiers \(scoreMod, maskMod, blockMask\)/.test(e.message);
      assert.throws(() => attention(q, q, q, { ...options, implementation: 'webgpu' }), refused);
      assert.throws(() => attention(q, q, q, options), refused);
      assert.throws(() => attentionVjp(q, q, q, { ...options, implementation: 'webgpu' }), refused);
      // Past the registry too: the plans themselves refuse them.
      const problem = validateAttention(q, q, q, options);
      const plan = planForward(problem, webgpuContext().info.limits);
      assert.equal(plan.ok ? '' : plan.reason, MODIFIERS_REASON);
    }
    q.dispose();
  });

  it('refuses by name what it cannot run: a limit, and a forced backward on host tensors', () => {
    const q = randomNormal([1, 8, 2, 16], { seed: 1, dtype: 'float32' }).to('webgpu');
    const lse = randomNormal([1, 8, 2], { seed: 2, dtype: 'float32' }).to('webgpu');
    const p = validateBackward(q, q, q, q, lse, q, {});
    const { limits } = webgpuContext().info;
    const small = planBackward(p, { ...limits, maxStorageBuffersPerShaderStage: 4 });
    assert.equal(small.ok, false);
    assert.match(small.ok ? '' : small.reason, /maxStorageBuffersPerShaderStage/);
    const host = randomNormal([1, 8, 2, 16], { seed: 1, dtype: 'float32' });
    assert.throws(
      () => attentionVjp(host, host, host, { implementation: 'webgpu' }),
      (e: unknown) => e instanceof UnsupportedError && /webgpu/.test(e.message),
    );
    for (const t of [q, lse]) t.dispose();
  });
});
