/**
 * The comparison every correctness check uses, written once: FlashAttention's rule. A backend's max
 * error against the float64 reference must be at most 2× the error of a same-precision reference,
 * plus a floor:
 *
 *   max|actual − reference64| ≤ 2 · max|baseline − reference64| + floor(precision)
 *
 * `checkAccuracy` applies it to any pair of tensors (as flat float64 arrays) with their baseline, so
 * every operation uses it: the forward output here, the gradients dQ, dK, dV, dBias (gradients.ts,
 * with the floor scaled by the gradient's magnitude), a decode step's output. An operation brings
 * its own float64 reference and its own same-precision baseline; the rule and the printout are these.
 *
 * The same-precision reference (baseline) of the forward, `plainLowPrecision`, is what FlashAttention's
 * tests compare with (attention_ref with upcast=False): the unfused computation by a framework in the
 * inputs' dtype. Concretely, from the inputs' values in `dtype` (the kernel's exact inputs):
 *   1. s = q·k summed exactly (float64), rounded to dtype — a GEMM writing its output in dtype;
 *   2. the logit round(s · scale + bias) in dtype; masked pairs −inf;
 *   3. softmax in float64 of those logits, each weight P rounded to dtype;
 *   4. P·V summed exactly, the output rounded to dtype.
 * For float32 'highest' every rounding is to float32; for 'tf32' the baseline is float32's (TF32 is
 * a promise about products only), so its floor carries the 10-bit-mantissa error.
 *
 * | precision | floor | why                                                        |
 * |-----------|-------|------------------------------------------------------------|
 * | float64   | 1e-12 | reordered float64 sums                                     |
 * | float32   | 2e-5  | float32 accumulation over S ≤ a few thousand keys          |
 * | tf32      | 5e-3  | 10-bit mantissa inputs to both matmuls                     |
 * | float16   | 2e-3  | output rounding ~5e-4 at |O|≈1, plus fp16 P in P·V         |
 * | bfloat16  | 1e-2  | output rounding ~4e-3 at |O|≈1, plus bf16 P in P·V         |
 *
 * The log-sum-exp is judged one way for every backend (`checkLogSumExp`): the relative error
 * |a − e| / max(1, |e|) of each row, −inf (a row that sees no key) exactly where the reference has
 * it, within LOGSUMEXP_TOLERANCE of the precision. Every backend computes its logits in float32 from
 * the rounded inputs (tensor-core products are exact, sums float32), so the bound does not depend on
 * the 8-bit or 11-bit mantissa of the inputs: 5e-4 is ~100× a float32 log-sum-exp's error and leaves
 * room for ex2/lg2.approx, not for a lost key; TF32's rounded products move it by up to ~1e-2.
 */

import { validateAttention } from '../api/validate.js';
import { forEachRow, type RowLogits } from '../backends/cpu/rows.js';
import type { AttentionOptions } from '../backends/problem.js';
import { type FloatDType, rounder } from '../tensor/dtype.js';
import type { Tensor } from '../tensor/tensor.js';

/** What a result is judged as: a dtype, or 'tf32' (float32 inputs, TF32 products). */
export type Precision = FloatDType | 'tf32';

export const ABSOLUTE_TOLERANCE: Record<Precision, number> = {
  float64: 1e-12,
  float32: 2e-5,
  tf32: 5e-3,
  float16: 2e-3,
  bfloat16: 1e-2,
  float8_e4m3fn: 1e-1,
  float8_e5m2: 2e-1,
};

/** Bound on the log-sum-exp's relative error (see the header). */
export const LOGSUMEXP_TOLERANCE: Record<Precision, number> = {
  float64: 1e-12,
  float32: 5e-4,
  tf32: 3e-2,
  float16: 5e-4,
  bfloat16: 5e-4,
  float8_e4m3fn: 5e-2,
  float8_e5m2: 5e-2,
};

/** Max |a − b|; equal values (also equal infinities) differ by 0, any NaN makes it NaN. */
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

/** The forward's same-precision reference (steps 1–4 of the header) on host inputs of `dtype`. */
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
  const acc = new Float64Array(Hv);
  const r = rounder(dtype);
  const visit = ({ b, n, i, kh, lo, hi, max, logits }: RowLogits) => {
    if (max === Number.NEGATIVE_INFINITY) return;
    let sum = 0;
    for (let j = lo; j < hi; j++) sum += logits[j] = Math.exp(logits[j] - max);
    acc.fill(0);
    for (let j = lo; j < hi; j++) {
      const weight = r(logits[j] / sum); // P in dtype, rounded once per key
      if (weight === 0) continue;
      const vOff = ((b * S + j) * K + kh) * Hv;
      for (let h = 0; h < Hv; h++) acc[h] += weight * va[vOff + h];
    }
    const oOff = ((b * T + i) * N + n) * Hv;
    for (let h = 0; h < Hv; h++) out[oOff + h] = r(acc[h]);
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

/**
 * `actual` against the float64 `reference` with the rule above; `floor` defaults to the precision's
 * (an operation whose values grow, as gradients do, passes its scaled floor). The message prints
 * both errors and the bound's terms.
 */
export function checkAccuracy(
  actual: Float64Array,
  reference: Float64Array,
  baseline: Float64Array,
  precision: Precision,
  floor = ABSOLUTE_TOLERANCE[precision],
): AccuracyReport {
  const error = actual.length === reference.length ? maxAbsDiff(actual, reference) : Number.NaN;
  const baselineError = maxAbsDiff(baseline, reference);
  const bound = 2 * baselineError + floor;
  const ok = Number.isFinite(error) && error <= bound;
  const sizes =
    actual.length === reference.length ? '' : ` (${actual.length} values, expected ${reference.length})`;
  const message = `max|err| ${error.toExponential(3)} vs bound ${bound.toExponential(3)} (2 × plain ${precision} error ${baselineError.toExponential(3)} + ${floor.toExponential(2)})${sizes}`;
  return { ok, error, baselineError, bound, message };
}

export interface LogSumExpReport {
  ok: boolean;
  /** Worst relative error over the rows where both are finite. */
  error: number;
  bound: number;
  message: string;
}

/** The log-sum-exp rule of the header: relative error per row, −inf exactly where expected. */
export function checkLogSumExp(
  actual: Float64Array,
  reference: Float64Array,
  precision: Precision,
): LogSumExpReport {
  const bound = LOGSUMEXP_TOLERANCE[precision];
  let error = 0;
  let wrong = '';
  for (let i = 0; i < reference.length; i++) {
    const [a, e] = [actual[i], reference[i]];
    if (a === e) continue;
    const relative = Math.abs(a - e) / Math.max(1, Math.abs(e));
    if (!Number.isFinite(relative)) {
      wrong ||= `; row ${i}: ${a}, expected ${e}`;
      continue;
    }
    error = Math.max(error, relative);
  }
  if (actual.length !== reference.length) wrong = `; ${actual.length} rows, expected ${reference.length}`;
  const ok = wrong === '' && error <= bound;
  return { ok, error, bound, message: `lse rel err ${error.toExponential(3)} vs bound ${bound}${wrong}` };
}
