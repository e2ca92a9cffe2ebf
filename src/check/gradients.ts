/**
 * The backward accuracy rule, FlashAttention's as for the forward (accuracy.ts): each gradient's max
 * error against the float64 reference must be at most 2× the error of a plain implementation in the
 * backend's own precision, plus a floor. The plain implementation is what an unfused framework does
 * in that dtype: logits, softmax weights P, dP = dO·Vᵀ, dS and each gradient rounded to the dtype
 * (its matmuls accumulating in higher precision, as float32-accumulating GEMMs do).
 *
 * The floor is the forward's absolute term (ABSOLUTE_TOLERANCE) times max(1, max|reference|): dK and
 * dQ grow with scale·Σ|dS|·|Q|, so an absolute floor alone would be too tight for large gradients.
 */

import { attention } from '../api/attention.js';
import { attentionBackward } from '../api/backward.js';
import { validateBackward } from '../api/validate-backward.js';
import type { AttentionGradients } from '../backends/backward-problem.js';
import { forEachRow, type RowLogits } from '../backends/cpu/rows.js';
import type { AttentionOptions } from '../backends/problem.js';
import { type FloatDType, roundTo } from '../tensor/dtype.js';
import { randomNormal } from '../tensor/random.js';
import { Tensor } from '../tensor/tensor.js';
import { ABSOLUTE_TOLERANCE, type AccuracyReport, maxAbsDiff } from './accuracy.js';

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

/** The plain same-precision backward (see the header), on host inputs of `dtype`. */
export function plainLowPrecisionGradients(inputs: BackwardInputs, dtype: FloatDType): GradientValues {
  const { q, k, v, options, dO } = inputs;
  // The output only fills the validated problem's slot; the plain path recomputes what it needs.
  const p = validateBackward(q, k, v, dO, Tensor.zeros(dO.shape.slice(0, -1), 'float32'), dO, options);
  const { T, S, N, K, H, Hv, scale } = p;
  const r = (x: number) => roundTo(x, dtype);
  const qa = p.query.toFloat64Array();
  const ka = p.key.toFloat64Array();
  const va = p.value.toFloat64Array();
  const da = p.dOutput.toFloat64Array();
  const dq = new Float64Array(qa.length);
  const dk = new Float64Array(ka.length);
  const dv = new Float64Array(va.length);
  const dbias = p.bias ? new Float64Array(p.bias.tensor.size) : null;
  const bs = p.bias?.strides ?? [0, 0, 0, 0];
  const dP = new Float64Array(S);
  const visit = ({ b, n, i, kh, lo, hi, max, logits }: RowLogits) => {
    if (max === Number.NEGATIVE_INFINITY) return;
    let sum = 0;
    for (let j = lo; j < hi; j++) sum += logits[j] = Math.exp(logits[j] - max);
    const qOff = ((b * T + i) * N + n) * H;
    const oOff = ((b * T + i) * N + n) * Hv;
    let D = 0;
    for (let j = lo; j < hi; j++) {
      const P = (logits[j] = r(logits[j] / sum));
      if (P === 0) continue;
      const vOff = ((b * S + j) * K + kh) * Hv;
      let dot = 0;
      for (let h = 0; h < Hv; h++) dot += da[oOff + h] * va[vOff + h];
      dP[j] = r(dot);
      D += P * dP[j];
    }
    D = r(D);
    const biasRow = b * bs[0] + n * bs[1] + i * bs[2];
    for (let j = lo; j < hi; j++) {
      const P = logits[j];
      if (P === 0) continue;
      const dS = r(P * (dP[j] - D));
      const kOff = ((b * S + j) * K + kh) * H;
      const vOff = ((b * S + j) * K + kh) * Hv;
      for (let h = 0; h < Hv; h++) dv[vOff + h] += P * da[oOff + h];
      for (let h = 0; h < H; h++) {
        dq[qOff + h] += scale * dS * ka[kOff + h];
        dk[kOff + h] += scale * dS * qa[qOff + h];
      }
      if (dbias) dbias[biasRow + j * bs[3]] += dS;
    }
  };
  forEachRow(p, qa, ka, visit, r);
  const rounded = (a: Float64Array) => a.map(r);
  const values: GradientValues = { dQuery: rounded(dq), dKey: rounded(dk), dValue: rounded(dv) };
  if (dbias) values.dBias = rounded(dbias);
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
    const floor = ABSOLUTE_TOLERANCE[precision] * magnitude;
    const bound = 2 * baselineError + floor;
    const ok = Number.isFinite(error) && error <= bound;
    const message = `${gradient}: max|err| ${error.toExponential(3)} vs bound ${bound.toExponential(3)} (2 × plain ${precision} error ${baselineError.toExponential(3)} + ${floor.toExponential(2)})`;
    reports.push({ gradient, ok, error, baselineError, bound, message });
  }
  return reports;
}
