/**
 * The CPU reference: a direct transcription of softmax(Q·Kᵀ·scale + bias) · V with float64 arithmetic
 * throughout, one query row at a time. Every other backend is tested against it.
 *
 * A row that can see no key outputs zeros with log-sum-exp −inf. (JAX's XLA path returns the mean
 * of V there, because it masks with a large finite negative number; PyTorch's fused kernels have
 * returned NaN. Zeros are what FlashAttention and cuDNN produce, and what a padded row should hold.)
 */
import type { AttentionProblem, BackendOutput } from '../../api/problem.js';
import { Tensor } from '../../tensor/tensor.js';
import { type AttentionBackend, SUPPORTED } from '../registry.js';
import { keyRange, pairTerms } from './visibility.js';

export function referenceAttention(p: AttentionProblem): BackendOutput {
  const { B, T, S, N, K, H, Hv, scale } = p;
  const q = p.query.toFloat64Array();
  const k = p.key.toFloat64Array();
  const v = p.value.toFloat64Array();
  const terms = pairTerms(p);
  const out = new Float64Array(B * T * N * Hv);
  const lse = new Float32Array(B * T * N).fill(Number.NEGATIVE_INFINITY);
  const group = N / K;
  const logits = new Float64Array(S);
  for (let b = 0; b < B; b++) {
    for (let n = 0; n < N; n++) {
      const kh = Math.floor(n / group);
      for (let i = 0; i < T; i++) {
        const { lo, hi } = keyRange(p, b, i);
        const qOff = ((b * T + i) * N + n) * H;
        const [ms, bs] = [terms.maskStrides, terms.biasStrides];
        const maskRow = b * ms[0] + n * ms[1] + i * ms[2];
        const biasRow = b * bs[0] + n * bs[1] + i * bs[2];
        let max = Number.NEGATIVE_INFINITY;
        for (let j = lo; j < hi; j++) {
          let s = Number.NEGATIVE_INFINITY;
          if (!terms.mask || terms.mask[maskRow + j * ms[3]]) {
            const kOff = ((b * S + j) * K + kh) * H;
            let dot = 0;
            for (let h = 0; h < H; h++) dot += q[qOff + h] * k[kOff + h];
            s = dot * scale + (terms.bias ? terms.bias[biasRow + j * bs[3]] : 0);
          }
          logits[j] = s;
          if (s > max) max = s;
        }
        if (max === Number.NEGATIVE_INFINITY) continue; // nothing visible: zeros, lse −inf
        let sum = 0;
        for (let j = lo; j < hi; j++) sum += logits[j] = Math.exp(logits[j] - max);
        const oOff = ((b * T + i) * N + n) * Hv;
        for (let j = lo; j < hi; j++) {
          const w = logits[j] / sum;
          if (w === 0) continue;
          const vOff = ((b * S + j) * K + kh) * Hv;
          for (let h = 0; h < Hv; h++) out[oOff + h] += w * v[vOff + h];
        }
        lse[(b * T + i) * N + n] = max + Math.log(sum);
      }
    }
  }
  return {
    output: Tensor.fromArray(out, [B, T, N, Hv], p.dtype),
    logSumExp: p.returnLogSumExp ? Tensor.fromRaw(lse, [B, T, N], 'float32') : undefined,
    variant: 'cpu-reference-f64',
  };
}

export const cpuReferenceBackend: AttentionBackend = {
  name: 'reference',
  device: 'cpu',
  supports: () => SUPPORTED,
  run: referenceAttention,
};
