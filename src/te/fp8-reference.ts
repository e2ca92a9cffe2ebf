/**
 * The CPU reference for FP8 attention over quantised operands and dotProductAttention's options
 * (the arithmetic, and why P is not rounded to e4m3, is in backends/cpu/fp8-reference.ts).
 */

import { validateAttention } from '../api/validate.js';
import {
  dequantisedOperand,
  type Fp8Operand,
  type Fp8ReferenceResult,
  fp8ReferenceOnProblem,
} from '../backends/cpu/fp8-reference.js';
import type { AttentionOptions } from '../backends/problem.js';
import type { Fp8DType } from '../tensor/dtype.js';

export type { Fp8Operand, Fp8ReferenceResult };

/**
 * FP8 attention in float64 over quantised (B,T,N,H), (B,S,K,H), (B,S,K,Hv) operands.
 * `options` are dotProductAttention's (mask, lengths, window, bias, scale), applied by the same
 * visibility rule as the CPU backends.
 *
 * @example
 * const q8 = quantiseTensor(q, 32); // likewise k8, v8
 * const { output8, amaxO } = fp8ReferenceAttention(q8, k8, v8, { isCausal: true }, 448 / 4);
 */
export function fp8ReferenceAttention(
  q8: Fp8Operand,
  k8: Fp8Operand,
  v8: Fp8Operand,
  options: AttentionOptions,
  scaleO: number,
  outputDType: Fp8DType = 'float8_e4m3fn',
): Fp8ReferenceResult {
  const { implementation: _ignored, ...rest } = options;
  const p = validateAttention(dequantisedOperand(q8), dequantisedOperand(k8), dequantisedOperand(v8), rest);
  return fp8ReferenceOnProblem(p, scaleO, outputDType);
}
