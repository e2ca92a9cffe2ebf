/**
 * Accuracy rule (FlashAttention's): a backend's max error against the float64 reference must be at
 * most 2× the error of a plain implementation in the backend's own precision, plus a small absolute
 * term. The plain implementation rounds the logits, the softmax weights and the output to the dtype,
 * as an unfused framework implementation in that dtype does.
 *
 * | dtype    | absolute term | why                                                  |
 * |----------|---------------|------------------------------------------------------|
 * | float64  | 1e-12         | reordered float64 sums                               |
 * | float32  | 2e-5          | float32 accumulation over S ≤ a few thousand keys    |
 * | tf32     | 5e-3          | 10-bit mantissa inputs to both matmuls               |
 * | float16  | 2e-3          | output rounding ~5e-4 at |O|≈1, plus fp16 P in P·V   |
 * | bfloat16 | 1e-2          | output rounding ~4e-3 at |O|≈1, plus bf16 P in P·V   |
 */

import { validateAttention } from '../api/validate.js';
import { forEachRow, type RowLogits } from '../backends/cpu/rows.js';
import type { AttentionOptions } from '../backends/problem.js';
import { type FloatDType, roundTo } from '../tensor/dtype.js';
import type { Tensor } from '../tensor/tensor.js';

export const ABSOLUTE_TOLERANCE: Record<FloatDType | 'tf32', number> = {
  float64: 1e-12,
  float32: 2e-5,
  tf32: 5e-3,
  float16: 2e-3,
  bfloat16: 1e-2,
  float8_e4m3fn: 1e-1,
  float8_e5m2: 2e-1,
};

export function maxAbsDiff(a: Float64Array, b: Float64Array): number {
  let max = 0;
  for (let i = 0; i < a.length; i++) {
    if (a[i] === b[i]) continue; // equal infinities (an empty row's −inf log-sum-exp) differ by 0
    const d = Math.abs(a[i] - b[i]);
    if (Number.isNaN(d)) return Number.NaN;
    if (d > max) max = d;
  }
  return max;
}

/** The plain same-precision implementation (naive: logits, weights and output rounded to `dtype`). */
export function plainLowPrecision(
  q: Tensor,
  k: Tensor,
  v: Tensor,
  options: AttentionOptions,
  dtype: FloatDType,
): Float64Array {
  const p = validateAttention(q, k, v, options);
  const { B, T, S, N, K, Hv } = p;
  const va = p.value.toFloat64Array();
  const out = new Float64Array(B * T * N * Hv);
  const r = (x: number) => roundTo(x, dtype);
  const visit = ({ b, n, i, kh, lo, hi, max, logits }: RowLogits) => {
    if (max === Number.NEGATIVE_INFINITY) return;
    let sum = 0;
    for (let j = lo; j < hi; j++) sum += logits[j] = Math.exp(logits[j] - max);
    for (let h = 0; h < Hv; h++) {
      let acc = 0;
      for (let j = lo; j < hi; j++) acc += r(logits[j] / sum) * va[((b * S + j) * K + kh) * Hv + h];
      out[((b * T + i) * N + n) * Hv + h] = r(acc);
    }
  };
  forEachRow(p, p.query.toFloat64Array(), p.key.toFloat64Array(), visit, r);
  return out;
}

export interface AccuracyReport {
  ok: boolean;
  error: number;
  baselineError: number;
  bound: number;
  message: string;
}

/** Checks `actual` against the float64 `reference` with the rule above; message prints both errors. */
export function checkAccuracy(
  actual: Float64Array,
  reference: Float64Array,
  baseline: Float64Array,
  precision: FloatDType | 'tf32',
): AccuracyReport {
  const error = maxAbsDiff(actual, reference);
  const baselineError = maxAbsDiff(baseline, reference);
  const bound = 2 * baselineError + ABSOLUTE_TOLERANCE[precision];
  const ok = Number.isFinite(error) && error <= bound;
  const message = `max|err| ${error.toExponential(3)} vs bound ${bound.toExponential(3)} (2 × plain ${precision} error ${baselineError.toExponential(3)} + ${ABSOLUTE_TOLERANCE[precision]})`;
  return { ok, error, baselineError, bound, message };
}
