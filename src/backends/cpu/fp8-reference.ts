/**
 * The CPU reference for FP8 attention: the same quantised inputs and scales the GPU path uses,
 * computed in float64, so that the GPU result is checked against its own arithmetic and not only
 * against bf16.
 *
 *   O = softmax(scale · deq(Q8)·deq(K8)ᵀ [masked]) · deq(V8),  deq(x8) = decode(x8) · scaleInv
 *   amax_s = max P (before scale_s),  amax_o = max |O| (before scale_o),  O8 = sat(rne(O · scale_o))
 *
 * P is not rounded to e4m3 here. cuDNN does quantise P inside its kernel, but a literal emulation
 * (normalised P · scale_s → e4m3) fitted the H200's output worse than this exact form (2.8e-2 vs
 * 1.7e-2 max error, cudnn-sdpa-verified.md §7.5): the kernel quantises unnormalised values. So the
 * tolerance against this reference is e4m3 output rounding plus a P-quantisation term.
 */

import { allocFloat64 } from '../../tensor/checks.js';
import type { Fp8DType } from '../../tensor/dtype.js';
import { Tensor } from '../../tensor/tensor.js';
import type { AttentionProblem } from '../problem.js';
import { dequantiseValues, type Quantised, quantiseValues } from './fp8-quantise.js';
import { forEachRow, softmaxTimesValue } from './rows.js';

/** A quantised operand: FP8 codes and the factor back to its units. */
export type Fp8Operand = Pick<Quantised, 'tensor' | 'scaleInv'>;

export interface Fp8ReferenceResult {
  /** O in float64 from the dequantised inputs, before output quantisation, (B,T,N,Hv). */
  readonly exact: Float64Array;
  /** O quantised with scale_o, as the GPU returns it. */
  readonly output8: Quantised;
  /** max P over visible pairs (1 when a row sees a single key). */
  readonly amaxS: number;
  /** max |O| before scale_o. */
  readonly amaxO: number;
}

/** The float64 tensor of an operand's dequantised values, in its shape. */
export function dequantisedOperand(op: Fp8Operand): Tensor {
  return Tensor.fromArray(dequantiseValues(op.tensor, op.scaleInv), op.tensor.shape, 'float64');
}

/**
 * FP8 attention in float64 over a problem whose query, key and value are the dequantised
 * (dequantisedOperand) FP8 operands; its options (mask, lengths, window, bias, scale) are applied by
 * the same visibility rule as the CPU backends.
 */
export function fp8ReferenceOnProblem(
  p: AttentionProblem,
  scaleO: number,
  outputDType: Fp8DType = 'float8_e4m3fn',
): Fp8ReferenceResult {
  const { B, T, N, Hv } = p;
  const v = p.value.toFloat64Array();
  const out = allocFloat64([B, T, N, Hv]);
  let amaxS = 0;
  forEachRow(p, p.query.toFloat64Array(), p.key.toFloat64Array(), (row) => {
    if (row.max === Number.NEGATIVE_INFINITY) return; // nothing visible: zeros, as every backend
    // The row's largest weight is exp(0)/sum: the max of P is 1/min(sum) over rows. A NaN row (NaN
    // sum) is skipped, as the GPU's fmaxf skips NaN (and TE's amax reductions do).
    const sum = softmaxTimesValue(p, row, v, out);
    if (sum > 0) amaxS = Math.max(amaxS, 1 / sum);
  });
  const output8 = quantiseValues(out, [B, T, N, Hv], scaleO, outputDType);
  return { exact: out, output8, amaxS, amaxO: output8.amax };
}
