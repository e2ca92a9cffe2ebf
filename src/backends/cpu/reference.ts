/**
 * The CPU reference: a direct transcription of softmax(Q·Kᵀ·scale + bias) · V with float64 arithmetic
 * throughout, one query row at a time. Every other backend is tested against it.
 *
 * A row that can see no key outputs zeros with log-sum-exp −inf. (JAX's XLA path returns the mean
 * of V there, because it masks with a large finite negative number; PyTorch's fused kernels have
 * returned NaN. Zeros are what FlashAttention and cuDNN produce, and what a padded row should hold.)
 */

import { allocFloat64, allocHost } from '../../tensor/checks.js';
import { Tensor } from '../../tensor/tensor.js';
import { type AttentionBackend, NO_PLAN } from '../backend.js';
import type { AttentionProblem, BackendOutput } from '../problem.js';
import { runDense } from './dense-view.js';
import { forEachRow, softmaxTimesValue } from './rows.js';

export function referenceAttention(p: AttentionProblem): BackendOutput {
  const { B, T, N, Hv } = p;
  const v = p.value.toFloat64Array();
  const out = allocFloat64([B, T, N, Hv]);
  const lse = (allocHost('float32', [B, T, N]) as Float32Array).fill(Number.NEGATIVE_INFINITY);
  forEachRow(p, p.query.toFloat64Array(), p.key.toFloat64Array(), (row) => {
    if (row.max === Number.NEGATIVE_INFINITY) return; // nothing visible: zeros, lse −inf
    const sum = softmaxTimesValue(p, row, v, out);
    lse[(row.b * T + row.i) * N + row.n] = row.max + Math.log(sum);
  });
  return {
    output: Tensor.fromArray(out, [B, T, N, Hv], p.dtype),
    logSumExp: p.returnLogSumExp ? Tensor.fromRaw(lse, [B, T, N], 'float32') : undefined,
    variant: 'cpu-reference-f64',
  };
}

export const cpuReferenceBackend: AttentionBackend = {
  name: 'reference',
  device: 'cpu',
  layouts: ['paged', 'packed', 'modifiers'],
  plan: () => NO_PLAN,
  run: (_plan, p) => runDense(p, referenceAttention),
};
