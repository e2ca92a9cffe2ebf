/**
 * Cases of the gradient suite beyond the forward's correctness matrix (cases.ts), shaped after the
 * backward tests of JAX, PyTorch, FlashAttention and cudnn-frontend: uneven sequence lengths past a
 * few hundred, where the float32 backward's intermediates (P, D = rowsum(dO∘O), dS) are summed over
 * many rows, and a peaked softmax (inputs ×10), where D from a 16-bit rounded output dominates the
 * error of dK and dQ (docs/guide/gradient-accuracy.md).
 */
import type { FloatDType } from '../tensor/dtype.js';
import { Tensor } from '../tensor/tensor.js';
import { type AttentionCase, buildInputs } from './cases.js';

/** Lengths where the float32 `naive` backward once exceeded 2× the plain float32 error. */
export const GRADIENT_CASES: readonly AttentionCase[] = [
  {
    name: 'causal top-left T=1024 S=103',
    shape: { B: 1, T: 1024, S: 103, N: 2, K: 2, H: 64 },
    options: { isCausal: true },
  },
  {
    name: 'boolean mask T=312 S=408',
    shape: { B: 1, T: 312, S: 408, N: 2, K: 2, H: 64 },
    maskShape: [1, 1, 312, 408],
  },
];

/** How much the peaked cases multiply Q, K and V by: logits ×100, most rows nearly one-hot. */
export const PEAKED_FACTOR = 10;

/** A peaked softmax: every input ×10 (FlashAttention's and JAX's large-logit backward tests). */
export const PEAKED_CASES: readonly AttentionCase[] = [
  { name: 'peaked (inputs ×10)', shape: { B: 2, T: 128, S: 128, N: 2, K: 2, H: 64 } },
  {
    name: 'peaked (inputs ×10), causal T=200 S=300',
    shape: { B: 1, T: 200, S: 300, N: 2, K: 1, H: 64 },
    options: { isCausal: true },
  },
];

/** buildInputs with Q, K and V multiplied by `factor` (exact in every dtype for a power of two; ×10 rounds once). */
export function scaledInputs(c: AttentionCase, dtype: FloatDType, seed: number, factor: number) {
  const inputs = buildInputs(c, dtype, seed);
  const scale = (t: Tensor) =>
    Tensor.fromArray(
      t.toFloat64Array().map((x) => x * factor),
      t.shape,
      dtype,
    );
  return { ...inputs, q: scale(inputs.q), k: scale(inputs.k), v: scale(inputs.v) };
}
