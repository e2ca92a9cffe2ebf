/**
 * The float64 gradient sums of the CPU reference backward (reference-backward.ts) and of the plain
 * same-precision baseline of the backward accuracy rule (src/check/gradients.ts), computed once, so
 * that the baseline is the reference with its intermediates rounded and nothing else. Row by row
 * (forEachRow, rows.ts), for a row that sees some key:
 *
 *   P = softmax(logits);  dP_j = dO·v_j;  D = Σ_j P_j·dP_j;  dS_j = P_j·(dP_j − D)
 *   dV_j += P_j·dO;  dQ += scale·dS_j·k_j;  dK_j += scale·dS_j·q;  dBias_j += dS_j
 *
 * With a score modifier f, dS_j above is the gradient of the modified score and is taken back through f:
 * dS_j ← dS_j · f'(s_j) at the score s_j before f (and learned captures gain dS_j · ∂f/∂capture).
 *
 * `round`, when given, rounds the logits (as forEachRow does), P, dP, D and dS; `accumulate`, when
 * given, rounds every partial sum of dQ, dK, dV and dBias (a GEMM accumulating in the dtype itself,
 * as float32 GEMMs do), each sum taken in the order a GEMM's inner loop takes it.
 *
 * Which pairs carry what (docs/guide/gradient-accuracy.md, "NaN and Inf"): D sums over the pairs the
 * forward's weighted sum takes (a −inf logit is masked, an underflowed weight still counts: 0·NaN is
 * NaN), so D is NaN exactly when the forward output row holds a NaN; dV and dS then skip the pairs of
 * weight 0, so a NaN there does not leak in. A NaN row (a NaN or +inf logit) has NaN weights at every
 * pair that lengths, causality, the window and the boolean mask leave it, −inf logits included (as
 * exp(−inf − NaN) is NaN in any autodiff); pairs the boolean mask removes stay out of it. A row that
 * sees nothing contributes nothing.
 */
import type { BackwardProblem } from '../backward-problem.js';
import { type GradientBuffers, gradientBuffers } from './gradients.js';
import { forEachRow, type RowLogits } from './rows.js';
import { pairTerms } from './visibility.js';

const exact = (x: number) => x;

/** The sums over every row of `p`, kept in float64: the caller rounds each once, to its dtype. */
export function gradientSums(
  p: BackwardProblem,
  round?: (x: number) => number,
  accumulate?: (x: number) => number,
): GradientBuffers {
  const q = p.query.toFloat64Array();
  const k = p.key.toFloat64Array();
  const g = gradientBuffers(p);
  forEachRow(p, q, k, rowGradients(p, q, k, g, round ?? exact, accumulate ?? exact), round);
  return g;
}

function rowGradients(
  p: BackwardProblem,
  q: Float64Array,
  k: Float64Array,
  g: GradientBuffers,
  round: (x: number) => number,
  acc: (x: number) => number,
): (row: RowLogits) => void {
  const { T, S, N, K, H, Hv, scale } = p;
  const v = p.value.toFloat64Array();
  const dO = p.dOutput.toFloat64Array();
  const bs = p.bias?.strides ?? [0, 0, 0, 0];
  const { mask, maskStrides: ms } = pairTerms(p);
  const dP = new Float64Array(S);
  // 1 where the pair is in the forward's weighted sum (see the header).
  const open = new Uint8Array(S);
  // A pair maskMod drops is a false entry of a boolean mask; dS reaches the pre-modifier score through
  // scoreModGrad (the chain rule), which also adds the learned captures' gradients.
  const maskMod = p.modifiers?.maskMod;
  const scoreModGrad = p.modifiers?.scoreModGrad;
  const captureGrads = g.dcaptures ?? [];
  return ({ b, n, i, kh, lo, hi, max, logits, raw }) => {
    if (max === Number.NEGATIVE_INFINITY) return; // sees nothing (or padded): zero gradients
    const nanRow = !(max < Number.POSITIVE_INFINITY);
    const maskRow = b * ms[0] + n * ms[1] + i * ms[2];
    let sum = 0;
    for (let j = lo; j < hi; j++) {
      const kept = mask?.[maskRow + j * ms[3]] !== 0 && (!maskMod || maskMod(b, n, i, j)); // no mask: kept
      open[j] = kept && (nanRow || logits[j] !== Number.NEGATIVE_INFINITY) ? 1 : 0;
      sum += logits[j] = Math.exp(logits[j] - max);
    }
    const qOff = ((b * T + i) * N + n) * H;
    const oOff = ((b * T + i) * N + n) * Hv;
    let D = 0;
    for (let j = lo; j < hi; j++) {
      const P = (logits[j] = round(logits[j] / sum));
      if (!open[j]) continue;
      const vOff = ((b * S + j) * K + kh) * Hv;
      let dot = 0;
      for (let h = 0; h < Hv; h++) dot += dO[oOff + h] * v[vOff + h];
      dP[j] = round(dot);
      D += P * dP[j];
    }
    D = round(D);
    const biasRow = b * bs[0] + n * bs[1] + i * bs[2];
    for (let j = lo; j < hi; j++) {
      const P = logits[j];
      if (!open[j] || P === 0) continue;
      let dS = round(P * (dP[j] - D));
      if (scoreModGrad && raw) dS = round(scoreModGrad(raw[j], dS, b, n, i, j, captureGrads));
      const kOff = ((b * S + j) * K + kh) * H;
      const vOff = ((b * S + j) * K + kh) * Hv;
      for (let h = 0; h < Hv; h++) g.dv[vOff + h] = acc(g.dv[vOff + h] + P * dO[oOff + h]);
      const dLogit = scale * dS;
      for (let h = 0; h < H; h++) {
        g.dq[qOff + h] = acc(g.dq[qOff + h] + dLogit * k[kOff + h]);
        g.dk[kOff + h] = acc(g.dk[kOff + h] + dLogit * q[qOff + h]);
      }
      if (g.dbias) g.dbias[biasRow + j * bs[3]] = acc(g.dbias[biasRow + j * bs[3]] + dS);
    }
  };
}
