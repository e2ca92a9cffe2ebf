/**
 * The FP8 step emulated on the CPU: the float64 FP8 reference over the same quantised operands
 * the GPU path uses — the same scales, the same state updates — so the whole recipe machinery is
 * testable without a GPU.
 */
import { type Fp8DType, fp8Max } from '../../tensor/dtype.js';
import type { Fp8StepOutput } from '../fp8-backend.js';
import type { Fp8StepProblem, PerTensor } from '../fp8-problem.js';
import { absMax, dequantiseTensor, quantiseValues } from './fp8-quantise.js';
import { dequantisedOperand, fp8ReferenceOnProblem } from './fp8-reference.js';

/**
 * The scales one step quantises with under current scaling, derived from this step's amax of Q, K
 * and V, with two bounds that hold for every input: P ≤ 1, so scale_s = fp8Max; and each output
 * row is a convex combination of V rows, so |O| ≤ max|V| and scale_o = fp8Max / amax_v never clips.
 */
export function currentScales(amax: { q: number; k: number; v: number }, dtype: Fp8DType): PerTensor<number> {
  const max = fp8Max(dtype);
  const of = (a: number) => (a > 0 && Number.isFinite(a) ? Math.fround(max / a) : 1);
  return { q: of(amax.q), k: of(amax.k), v: of(amax.v), s: Math.fround(max), o: of(amax.v) };
}

/** Runs one FP8 step on the host (the registry's CPU entry; its support check is the GPU graph's). */
export function runFp8Emulated(p: Fp8StepProblem): Fp8StepOutput {
  const { dtype8 } = p;
  const values = { q: p.query.toFloat64Array(), k: p.key.toFloat64Array(), v: p.value.toFloat64Array() };
  const scales =
    p.scaling.kind === 'delayed'
      ? p.scaling.hostScales()
      : currentScales({ q: absMax(values.q), k: absMax(values.k), v: absMax(values.v) }, dtype8);
  const q8 = quantiseValues(values.q, p.query.shape, scales.q, dtype8);
  const k8 = quantiseValues(values.k, p.key.shape, scales.k, dtype8);
  const v8 = quantiseValues(values.v, p.value.shape, scales.v, dtype8);
  const problem64 = {
    ...p,
    dtype: 'float64' as const,
    query: dequantisedOperand(q8),
    key: dequantisedOperand(k8),
    value: dequantisedOperand(v8),
  };
  const reference = fp8ReferenceOnProblem(problem64, scales.o, dtype8);
  const amax = { q: q8.amax, k: k8.amax, v: v8.amax, s: reference.amaxS, o: reference.amaxO };
  p.state.recordHost(amax);
  const { tensor, scaleInv } = reference.output8;
  return {
    output: dequantiseTensor(tensor, scaleInv, p.dtype),
    output8: p.keepFp8Output ? { tensor, scaleInv } : undefined,
    report: { scales, amax },
    residuals: p.keepResiduals
      ? { q8: q8.tensor, k8: k8.tensor, v8: v8.tensor, o8: tensor, logSumExp: null }
      : undefined,
    variant: `cpu-fp8-emulated-${dtype8}-${p.causal ? 'causal' : 'full'}`,
  };
}
