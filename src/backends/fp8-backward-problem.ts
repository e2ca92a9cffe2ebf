/**
 * The FP8 attention backward as a problem, beside the FP8 step's (fp8-problem.ts): the forward's
 * validated problem and the residuals its FP8 step kept, the incoming gradient, the gradient FP8
 * type (e5m2 under TE's HYBRID format, e4m3 under E4M3) and the scales of the five backward tensors
 * TE keeps metas for: dO, dP (the softmax gradient dS fed to the last two matmuls), dQ, dK and dV.
 */

import type { Fp8DType } from '../tensor/dtype.js';
import type { Device } from '../tensor/storage.js';
import type { Tensor } from '../tensor/tensor.js';
import type { Fp8Residuals } from './fp8-backend.js';
import type { PerTensor } from './fp8-problem.js';
import type { AttentionProblem } from './problem.js';

export const FP8_GRADIENTS = ['dO', 'dP', 'dQ', 'dK', 'dV'] as const;
export type Fp8GradientName = (typeof FP8_GRADIENTS)[number];
export type PerGradient<T> = { readonly [name in Fp8GradientName]: T };

export interface Fp8BackwardProblem {
  /** The forward's problem: bfloat16, H = Hv, what fp8BackwardSupport accepted. */
  readonly problem: AttentionProblem;
  readonly residuals: Fp8Residuals;
  /** The scales the forward step quantised Q, K, V, P (s) and O with. */
  readonly forwardScales: PerTensor<number>;
  /** ∂loss/∂output, (B,T,N,H) bfloat16 on the problem's device. */
  readonly dOutput: Tensor;
  readonly dtype8: Fp8DType;
  readonly scales: PerGradient<number>;
}

export interface Fp8BackwardOutput {
  /** The gradients dequantised to bfloat16, in the inputs' shapes. */
  readonly dQuery: Tensor;
  readonly dKey: Tensor;
  readonly dValue: Tensor;
  /** The FP8 codes they came from (scale them by 1/scales.dQ, …). */
  readonly gradients8: { readonly dQuery: Tensor; readonly dKey: Tensor; readonly dValue: Tensor };
  /** max |x| of each backward tensor before its scale. */
  readonly amax: PerGradient<number>;
  readonly device: Device;
  readonly variant: string;
}
