/**
 * The FP8 attention backward emulated on the CPU: cuDNN's FP8 backward graph
 * (cuda/fp8/backward-graph.ts) followed step by step in float64, with its three quantisations inside
 * the graph done as the graph declares them, so that the module's FP8 backward runs (and its scale
 * bookkeeping is testable) without a GPU, and the GPU's gradients have a reference of their own
 * arithmetic:
 *
 *   dO8 = q(dO · scale_dO),  P = softmax(S) exactly,  P8 = e4m3(P · scale_s)
 *   dV  = deq(P8)ᵀ·deq(dO8)                                  → amax_dV, dV8 = q(dV · scale_dV)
 *   dS  = (deq(dO8)·deq(V8)ᵀ − rowsum(deq(dO8)∘deq(O8))) ∘ P · attn_scale → amax_dP, dS8 = q(dS · scale_dP)
 *   dQ  = deq(dS8)·deq(K8),  dK = deq(dS8)ᵀ·deq(Q8)          → amax, q(· scale)
 *
 * q() rounds to the gradient type (e5m2 or e4m3) with saturation, deq(x8) = decode(x8) / scale. The
 * GPU takes P from the FP8 forward's statistics (7.6e-4 from exact on the H200) and sums in float32
 * in its own order, so the two agree to a rounding step of the gradient type, not bit for bit.
 */
import { allocFloat64 } from '../../tensor/checks.js';
import { decodeArray, encodeOne, type Fp8DType } from '../../tensor/dtype.js';
import type { Fp8BackwardOutput, Fp8BackwardProblem } from '../fp8-backward-problem.js';
import { absMax, dequantiseTensor, dequantiseValues, quantiseValues } from './fp8-quantise.js';
import { forEachRow } from './rows.js';

const SATURATE = { saturate: true };

/** x rounded through the FP8 code of x·scale and back: what a matmul reading that code sees. */
function roundTrip(dtype: Fp8DType): (x: number, scale: number) => number {
  const table = decodeArray(
    Uint8Array.from({ length: 256 }, (_, i) => i),
    dtype,
  );
  return (x, scale) => {
    const scale32 = Math.fround(scale);
    return table[encodeOne(Math.fround(x * scale32), dtype, SATURATE)] / scale32;
  };
}

export function runFp8BackwardEmulated(b: Fp8BackwardProblem): Fp8BackwardOutput {
  const p = b.problem;
  const { B, T, S, N, K, H } = p;
  const { residuals: r, forwardScales: fs, scales, dtype8 } = b;
  const q = dequantiseValues(r.q8, 1 / fs.q);
  const k = dequantiseValues(r.k8, 1 / fs.k);
  const v = dequantiseValues(r.v8, 1 / fs.v);
  const o = dequantiseValues(r.o8, 1 / fs.o);
  const dOValues = b.dOutput.toFloat64Array();
  const dO8 = quantiseValues(dOValues, b.dOutput.shape, scales.dO, dtype8);
  const dO = dequantiseValues(dO8.tensor, dO8.scaleInv);
  const p8 = roundTrip('float8_e4m3fn');
  const dS8 = roundTrip(dtype8);

  const dq = allocFloat64([B, T, N, H]);
  const dk = allocFloat64([B, S, K, H]);
  const dv = allocFloat64([B, S, K, H]);
  let amaxDP = 0;
  const weights = new Float64Array(S);
  const dS = new Float64Array(S);
  forEachRow(p, q, k, (row) => {
    const { b: batch, n, i, kh, lo, hi, max, logits } = row;
    if (max === Number.NEGATIVE_INFINITY) return; // a row that sees nothing (or is padded): zeros
    let sum = 0;
    for (let j = lo; j < hi; j++) sum += weights[j] = Math.exp(logits[j] - max);
    const rowOff = ((batch * T + i) * N + n) * H;
    let rowDot = 0;
    for (let h = 0; h < H; h++) rowDot += dO[rowOff + h] * o[rowOff + h];
    for (let j = lo; j < hi; j++) {
      const weight = weights[j] / sum;
      if (weight === 0 && logits[j] === Number.NEGATIVE_INFINITY) {
        dS[j] = 0;
        continue;
      }
      const kvOff = ((batch * S + j) * K + kh) * H;
      const quantisedWeight = p8(weight, fs.s);
      let dP = 0;
      for (let h = 0; h < H; h++) {
        dv[kvOff + h] += quantisedWeight * dO[rowOff + h];
        dP += dO[rowOff + h] * v[kvOff + h];
      }
      dS[j] = (dP - rowDot) * weight * p.scale;
      amaxDP = Math.max(amaxDP, Math.abs(dS[j]));
      dS[j] = dS8(dS[j], scales.dP);
    }
    for (let j = lo; j < hi; j++) {
      if (dS[j] === 0) continue;
      const kvOff = ((batch * S + j) * K + kh) * H;
      for (let h = 0; h < H; h++) {
        dq[rowOff + h] += dS[j] * k[kvOff + h];
        dk[kvOff + h] += dS[j] * q[rowOff + h];
      }
    }
  });
  const out = (values: Float64Array, shape: readonly number[], scale: number) => {
    const quantised = quantiseValues(values, shape, scale, dtype8);
    return {
      codes: quantised.tensor,
      amax: quantised.amax,
      value: dequantiseTensor(quantised.tensor, quantised.scaleInv),
    };
  };
  const dQ = out(dq, p.query.shape, scales.dQ);
  const dK = out(dk, p.key.shape, scales.dK);
  const dV = out(dv, p.value.shape, scales.dV);
  return {
    dQuery: dQ.value,
    dKey: dK.value,
    dValue: dV.value,
    gradients8: { dQuery: dQ.codes, dKey: dK.codes, dValue: dV.codes },
    amax: { dO: absMax(dOValues), dP: amaxDP, dQ: dQ.amax, dK: dK.amax, dV: dV.amax },
    device: 'cpu',
    variant: `cpu-fp8-emulated-backward-${dtype8}-${p.causal ? 'causal' : 'full'}`,
  };
}
