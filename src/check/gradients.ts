/**
 * The backward accuracy rule, FlashAttention's as for the forward (accuracy.ts): each gradient's max
 * error against the float64 reference must be at most 2× the error of a plain implementation in the
 * backend's own precision, plus a floor. The plain implementation is what an unfused framework does
 * in that dtype: logits, softmax weights P, dP = dO·Vᵀ, dS and each gradient rounded to the dtype
 * (its matmuls accumulating in higher precision, as float32-accumulating GEMMs do).
 *
 * The floor is the forward's absolute term (ABSOLUTE_TOLERANCE) times max(1, max|reference|): dK and
 * dQ grow with scale·Σ|dS|·|Q|, so an absolute floor alone would be too tight for large gradients.
 * In float32 the plain baseline accumulates its GEMMs in float32 too (see plainLowPrecisionGradients),
 * so it carries the error any float32 backward has, and the floor is 2.5e-7 (2 units in the last place
 * at 1) rather than the forward's 2e-5, which would hide a backward 2× worse than plain: at T=1024
 * S=103 the plain dV error is 4.6e-6 at max|dV| 4.6, and 2e-5 × 4.6 alone would allow 9.2e-5.
 */

import { attention } from '../api/attention.js';
import { attentionBackward } from '../api/backward.js';
import { validateBackward } from '../api/validate-backward.js';
import type { AttentionGradients } from '../backends/backward-problem.js';
import { gradientSums } from '../backends/cpu/row-gradients.js';
import type { AttentionOptions } from '../backends/problem.js';
import { type FloatDType, rounder } from '../tensor/dtype.js';
import { randomNormal } from '../tensor/random.js';
import { Tensor } from '../tensor/tensor.js';
import { ABSOLUTE_TOLERANCE, type AccuracyReport, maxAbsDiff } from './accuracy.js';

/** The float32 floor of the backward rule (see the header). */
export const FLOAT32_FLOOR = 2.5e-7;

export type GradientName = 'dQuery' | 'dKey' | 'dValue' | 'dBias';

/** Float64 values of each gradient (dBias only with a bias). */
export type GradientValues = Partial<Record<GradientName, Float64Array>>;

export interface BackwardInputs {
  q: Tensor;
  k: Tensor;
  v: Tensor;
  options: AttentionOptions;
  dO: Tensor;
}

/** An incoming gradient dO for inputs of `dtype`: seeded normal values, the output's shape. */
export function randomOutputGradient(q: Tensor, v: Tensor, dtype: FloatDType, seed: number): Tensor {
  const shape = [...q.shape.slice(0, -1), v.shape[v.rank - 1]];
  return randomNormal(shape, { seed, dtype });
}

export function gradientValues(g: AttentionGradients): GradientValues {
  const values: GradientValues = {
    dQuery: g.dQuery.toFloat64Array(),
    dKey: g.dKey.toFloat64Array(),
    dValue: g.dValue.toFloat64Array(),
  };
  if (g.dBias) values.dBias = g.dBias.toFloat64Array();
  return values;
}

/** The float64 oracle: the CPU reference backward on float64 copies of exactly the given values. */
export function referenceGradients(inputs: BackwardInputs): GradientValues {
  const f64 = (t: Tensor) => t.toHost().astype('float64');
  const options = { ...inputs.options, bias: inputs.options.bias && f64(inputs.options.bias) };
  const [q, k, v, dO] = [f64(inputs.q), f64(inputs.k), f64(inputs.v), f64(inputs.dO)];
  const forward = attention(q, k, v, { ...options, implementation: 'reference', returnLogSumExp: true });
  const grads = attentionBackward(q, k, v, forward.output, forward.logSumExp as Tensor, dO, {
    ...options,
    implementation: 'reference',
  });
  return gradientValues(grads);
}

/**
 * The plain same-precision backward (see the header), on host inputs of `dtype`. In float32 every
 * GEMM accumulates in float32 (JAX's and PyTorch's float32 at the highest precision: no wider
 * accumulator exists): the logits' Q·Kᵀ and dP's dO·Vᵀ over H and Hv terms, D, and the gradients over
 * T or S terms, so that baseline carries the accumulation error any float32 backward has. With the
 * logits and dP taken exactly, the baseline's error stopped growing with H while every float32 GEMM's
 * does: CUDA naive's dV at H=256 read 2.2e-6 on an H100 against a bound of 1.2e-6, and the plain
 * baseline with float32 dot products reads 2.23e-6 itself. bfloat16/float16 GEMMs accumulate in
 * float32, which the float64 sums stand for.
 */
export function plainLowPrecisionGradients(inputs: BackwardInputs, dtype: FloatDType): GradientValues {
  const { q, k, v, options, dO } = inputs;
  // The output only fills the validated problem's slot; the plain path recomputes what it needs.
  const p = validateBackward(q, k, v, dO, Tensor.zeros(dO.shape.slice(0, -1), 'float32'), dO, options);
  // rounder(dtype), not roundTo: roundTo's checks and encode/decode per call made the float32 baseline,
  // which rounds every partial sum, ~100× slower than the float64 reference (74 s for the MHA case).
  const r = rounder(dtype);
  const g = gradientSums(p, r, dtype === 'float32' ? r : undefined);
  const rounded = (a: Float64Array) => a.map(r);
  const values: GradientValues = { dQuery: rounded(g.dq), dKey: rounded(g.dk), dValue: rounded(g.dv) };
  if (g.dbias) values.dBias = rounded(g.dbias);
  return values;
}

export interface GradientReport extends AccuracyReport {
  readonly gradient: GradientName;
}

/** Each gradient of `actual` against `reference` with the rule above (dBias when both have it). */
export function checkGradients(
  actual: GradientValues,
  reference: GradientValues,
  baseline: GradientValues,
  precision: FloatDType | 'tf32',
): GradientReport[] {
  const reports: GradientReport[] = [];
  for (const gradient of ['dQuery', 'dKey', 'dValue', 'dBias'] as const) {
    const want = reference[gradient];
    if (!want) continue;
    const got = actual[gradient];
    const plain = baseline[gradient] as Float64Array;
    if (!got) {
      const message = `${gradient} missing`;
      reports.push({ gradient, ok: false, error: Number.NaN, baselineError: 0, bound: 0, message });
      continue;
    }
    const error = maxAbsDiff(got, want);
    const baselineError = maxAbsDiff(plain, want);
    const magnitude = want.reduce((m, x) => Math.max(m, Math.abs(x)), 1);
    const floor = (precision === 'float32' ? FLOAT32_FLOOR : ABSOLUTE_TOLERANCE[precision]) * magnitude;
    const bound = 2 * baselineError + floor;
    const ok = Number.isFinite(error) && error <= bound;
    const message = `${gradient}: max|err| ${error.toExponential(3)} vs bound ${bound.toExponential(3)} (2 × plain ${precision} error ${baselineError.toExponential(3)} + ${floor.toExponential(2)})`;
    reports.push({ gradient, ok, error, baselineError, bound, message });
  }
  return reports;
}
