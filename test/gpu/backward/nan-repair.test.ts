/**
 * The gradient NaN repair (src/kernels/ops/grad_nan_repair.cu) on its own, whatever cuDNN does: every
 * element of dQ, dK, dV and dBias set to NaN, then repaired, must be the NaN rule's gradient (the float64
 * reference's kinds, NaN/±inf/finite, at every element, the finite ones close to it). So every row and
 * every dBias element is recomputed, over the forward's case list (causal in both alignments, rows that
 * see nothing, broadcast biases, a boolean mask, lengths, windows, GQA/MQA, H and Hv from 32 to 256,
 * including H=72 whose rows straddle the 16-byte pieces the scan reads) and the gradient NaN suite's
 * poisoned inputs. The forward's output and log-sum-exp come from `naive`, which holds the forward rule.
 * Then: finite gradients are left bit for bit as they were. Skips without a GPU.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { attention } from '../../../src/api/attention.js';
import { validateBackward } from '../../../src/api/validate-backward.js';
import type { AttentionGradients } from '../../../src/backends/backward-problem.js';
import {
  gradientRepairSupport,
  repairGradients,
} from '../../../src/backends/cuda/ops/gradient-nan-repair.js';
import { cudaAvailable } from '../../../src/backends/cuda/runtime/context.js';
import { allocDevice, fillDevice32 } from '../../../src/backends/cuda/runtime/memory.js';
import { type AttentionCase, buildInputs, CASES, LONG_CASES } from '../../../src/check/cases.js';
import {
  compareGradientNan,
  GRADIENT_NAN_CASES,
  gradientNanInputs,
} from '../../../src/check/gradient-nan.js';
import {
  type BackwardInputs,
  gradientValues,
  randomOutputGradient,
  referenceGradients,
} from '../../../src/check/gradients.js';
import { type FloatDType, itemSize } from '../../../src/tensor/dtype.js';
import { Tensor } from '../../../src/tensor/tensor.js';

const cuda = cudaAvailable();
const skip = cuda.ok ? false : `no CUDA device: ${cuda.reason}`;

/** Two NaNs of the dtype in one 32-bit word. */
const NAN_WORD: Partial<Record<FloatDType, number>> = {
  bfloat16: 0x7fc07fc0,
  float16: 0x7e007e00,
  float32: 0x7fc00000,
};

const ODD_HEADS = ['H=40 (padded to 48)', 'H=64 Hv=32 GQA', 'H=72 (ld not a multiple of 16 bytes in f16)'];
const SHAPE_CASES: readonly AttentionCase[] = [
  ...CASES,
  ...LONG_CASES.filter((c) => ODD_HEADS.includes(c.name)),
];

/** A device tensor of `shape` and `dtype` whose every element is NaN. */
function nanTensor(shape: readonly number[], dtype: FloatDType): Tensor {
  const size = shape.reduce((a, b) => a * b, 1);
  const buffer = allocDevice(size * itemSize(dtype));
  fillDevice32(buffer, NAN_WORD[dtype]!, Math.ceil((size * itemSize(dtype)) / 4));
  return Tensor.fromDeviceBuffer(buffer, [...shape], dtype);
}

/** The repair of all-NaN gradients of `inputs` (on the GPU), against the float64 reference. */
function repairAll(inputs: BackwardInputs, dtype: FloatDType): void {
  const { q, k, v, options, dO } = inputs;
  const device = { ...options, bias: options.bias?.to('cuda'), mask: options.mask?.to('cuda') };
  const [cq, ck, cv, cdO] = [q, k, v, dO].map((t) => t.to('cuda'));
  const f = attention(cq, ck, cv, { ...device, implementation: 'naive', returnLogSumExp: true });
  const lse = f.logSumExp as Tensor;
  const p = validateBackward(cq, ck, cv, f.output, lse, cdO, device);
  const support = gradientRepairSupport(p);
  assert.ok(support.ok, support.ok ? '' : support.reason);
  const grads: AttentionGradients = {
    dQuery: nanTensor(q.shape, dtype),
    dKey: nanTensor(k.shape, dtype),
    dValue: nanTensor(v.shape, dtype),
    dBias: device.bias ? nanTensor(device.bias.shape, dtype) : undefined,
  };
  try {
    repairGradients(p, grads);
    const r = compareGradientNan(gradientValues(grads), referenceGradients(inputs), dtype);
    assert.ok(r.ok, r.message);
  } finally {
    for (const t of [cq, ck, cv, cdO, device.bias, device.mask, f.output, lse, ...Object.values(grads)])
      t?.dispose();
  }
}

describe('gradient NaN repair: all-NaN gradients recomputed to the rule · bfloat16', { skip }, () => {
  SHAPE_CASES.forEach((c, index) => {
    it(`${c.name} · bfloat16`, () => {
      const { q, k, v, options } = buildInputs(c, 'bfloat16', 900 + 13 * index);
      repairAll(
        { q, k, v, options, dO: randomOutputGradient(q, v, 'bfloat16', 950 + 13 * index) },
        'bfloat16',
      );
    });
  });
  GRADIENT_NAN_CASES.forEach((c, index) => {
    it(`poisoned: ${c.name} · bfloat16`, () =>
      repairAll(gradientNanInputs(c, 'bfloat16', 600 + 10 * index), 'bfloat16'));
  });
});

describe('gradient NaN repair: all-NaN gradients recomputed to the rule · float32 and float16', {
  skip,
}, () => {
  const picked = SHAPE_CASES.filter((c) => /bias \(B,1,1,S\)|mask|padding \+ causal|H=72|H=256/.test(c.name));
  for (const dtype of ['float32', 'float16'] as const) {
    picked.forEach((c, index) => {
      it(`${c.name} · ${dtype}`, () => {
        const { q, k, v, options } = buildInputs(c, dtype, 300 + 7 * index);
        repairAll({ q, k, v, options, dO: randomOutputGradient(q, v, dtype, 350 + 7 * index) }, dtype);
      });
    });
  }
});

describe('gradient NaN repair: finite gradients stay as they are', { skip }, () => {
  it('a causal GQA problem with a bias: the bytes of dQ, dK, dV, dBias unchanged', () => {
    const c = CASES.find((x) => x.name === 'bias full (B,N,T,S) + causal')!;
    const { q, k, v, options } = buildInputs(c, 'bfloat16', 77);
    const dO = randomOutputGradient(q, v, 'bfloat16', 78);
    const device = { ...options, bias: options.bias?.to('cuda') };
    const [cq, ck, cv, cdO] = [q, k, v, dO].map((t) => t.to('cuda'));
    const f = attention(cq, ck, cv, { ...device, implementation: 'naive', returnLogSumExp: true });
    const p = validateBackward(cq, ck, cv, f.output, f.logSumExp as Tensor, cdO, device);
    // Finite values of the gradients' shapes (not the gradients: the repair must not touch any finite value).
    const grads: AttentionGradients = {
      dQuery: q.to('cuda'),
      dKey: k.to('cuda'),
      dValue: v.to('cuda'),
      dBias: device.bias ? options.bias!.to('cuda') : undefined,
    };
    const before = Object.values(grads).map((t) => Array.from(t!.toFloat64Array()));
    repairGradients(p, grads);
    const after = Object.values(grads).map((t) => Array.from(t!.toFloat64Array()));
    assert.deepEqual(after, before);
    for (const t of [cq, ck, cv, cdO, device.bias, f.output, f.logSumExp, ...Object.values(grads)])
      t?.dispose();
  });
});
