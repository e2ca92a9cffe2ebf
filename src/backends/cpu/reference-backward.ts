/**
 * The CPU reference backward: the gradients of softmax(Q·Kᵀ·scale + bias)·V transcribed directly,
 * float64 throughout, one query row at a time (formulas in src/api/backward-problem.ts). It is the
 * oracle of every other backward backend, and is itself checked against central finite differences.
 *
 * As an oracle it trusts nothing computed in lower precision: it recomputes each row's softmax from
 * Q, K and the bias (through the forward's own row loop, rows.ts) and takes D = Σ P·dP from that
 * softmax rather than dO·O from the given output, so the given output and log-sum-exp are unused.
 * Keys with weight 0 (masked, or underflowed) are skipped as the forward skips them, so a NaN there
 * does not leak in; a row that sees nothing contributes nothing.
 */

import { SUPPORTED } from '../backend.js';
import type { BackwardBackend } from '../backward-backend.js';
import type { BackwardOutput, BackwardProblem } from '../backward-problem.js';
import type { AttentionProblem } from '../problem.js';
import { gradientBuffers, gradientTensors } from './gradients.js';
import { forEachRow } from './rows.js';

export function referenceBackward(p: BackwardProblem): BackwardOutput {
  const { T, S, N, K, H, Hv, scale } = p;
  const q = p.query.toFloat64Array();
  const k = p.key.toFloat64Array();
  const v = p.value.toFloat64Array();
  const dO = p.dOutput.toFloat64Array();
  const g = gradientBuffers(p);
  const bs = p.bias?.strides ?? [0, 0, 0, 0];
  const dP = new Float64Array(S);
  forEachRow(p, q, k, ({ b, n, i, kh, lo, hi, max, logits }) => {
    if (max === Number.NEGATIVE_INFINITY) return; // sees nothing (or padded): zero gradients
    let sum = 0;
    for (let j = lo; j < hi; j++) sum += logits[j] = Math.exp(logits[j] - max);
    const qOff = ((b * T + i) * N + n) * H;
    const oOff = ((b * T + i) * N + n) * Hv;
    let D = 0;
    for (let j = lo; j < hi; j++) {
      const P = (logits[j] /= sum);
      if (P === 0) continue;
      const vOff = ((b * S + j) * K + kh) * Hv;
      let dot = 0;
      for (let h = 0; h < Hv; h++) dot += dO[oOff + h] * v[vOff + h];
      dP[j] = dot;
      D += P * dot;
    }
    const biasRow = b * bs[0] + n * bs[1] + i * bs[2];
    for (let j = lo; j < hi; j++) {
      const P = logits[j];
      if (P === 0) continue;
      const dS = P * (dP[j] - D);
      const kOff = ((b * S + j) * K + kh) * H;
      const vOff = ((b * S + j) * K + kh) * Hv;
      for (let h = 0; h < Hv; h++) g.dv[vOff + h] += P * dO[oOff + h];
      const dLogit = scale * dS;
      for (let h = 0; h < H; h++) {
        g.dq[qOff + h] += dLogit * k[kOff + h];
        g.dk[kOff + h] += dLogit * q[qOff + h];
      }
      if (g.dbias) g.dbias[biasRow + j * bs[3]] += dS;
    }
  });
  return gradientTensors(p, g, 'cpu-reference-backward-f64');
}

/**
 * Each row's log-sum-exp in float64 (B,T,N), −inf for a row that sees nothing: the residual the CPU
 * keeps for float64 inputs, where the forward's float32 log-sum-exp would cost 8 digits.
 */
export function exactLogSumExp(p: AttentionProblem): Float64Array {
  const { T, N } = p;
  const lse = new Float64Array(p.B * T * N).fill(Number.NEGATIVE_INFINITY);
  forEachRow(p, p.query.toFloat64Array(), p.key.toFloat64Array(), ({ b, n, i, lo, hi, max, logits }) => {
    if (max === Number.NEGATIVE_INFINITY) return;
    let sum = 0;
    for (let j = lo; j < hi; j++) sum += Math.exp(logits[j] - max);
    lse[(b * T + i) * N + n] = max + Math.log(sum);
  });
  return lse;
}

export const cpuReferenceBackward: BackwardBackend = {
  name: 'reference',
  device: 'cpu',
  supports: () => SUPPORTED,
  run: referenceBackward,
};
