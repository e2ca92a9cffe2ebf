/**
 * The float64 oracle for a modifier set, elementwise and plain (no tiling): for each (b, h, q) the
 * scores z_kv = score(scale·q·k_kv) where mask(b, h, q, kv) keeps the pair, −inf elsewhere; softmax,
 * O = P·V, log-sum-exp; and the backward by the chain rule:
 *   dP = dO·v,  dZ = P ∘ (dP − D) with D = dO·O,  dS = dZ · d score/d s,
 *   dQ = scale·Σ dS·k,  dK = scale·Σ dS·q,  dV = Σ P·dO,  d capture += dZ · d score/d capture.
 * Inputs are the exact values the device sees (16-bit inputs widened). GQA: KV head h / (N/K).
 */
import type { Tensor } from '../../src/tensor/tensor.js';
import type { ModifierCase } from './modifier-cases.js';

export interface ModifierReference {
  readonly output: Float64Array;
  readonly logSumExp: Float64Array;
  readonly dQuery: Float64Array;
  readonly dKey: Float64Array;
  readonly dValue: Float64Array;
  readonly dCaptures: Float64Array[];
}

export function modifierReference(
  m: ModifierCase,
  q: Tensor,
  k: Tensor,
  v: Tensor,
  dO: Tensor,
  scale: number,
): ModifierReference {
  const [B, T, N, H] = q.shape;
  const [, S, K] = k.shape;
  const Hv = v.shape[3];
  const G = N / K;
  const [qa, ka, va, ga] = [q, k, v, dO].map((t) => t.toFloat64Array());
  const output = new Float64Array(B * T * N * Hv);
  const logSumExp = new Float64Array(B * T * N);
  const dQuery = new Float64Array(qa.length);
  const dKey = new Float64Array(ka.length);
  const dValue = new Float64Array(va.length);
  const dCaptures = m.captures.map((c) => new Float64Array(c.tensor.size));
  const s = new Float64Array(S);
  const z = new Float64Array(S);
  const p = new Float64Array(S);
  for (let b = 0; b < B; b++)
    for (let h = 0; h < N; h++) {
      const kh = Math.floor(h / G);
      for (let t = 0; t < T; t++) {
        const qo = ((b * T + t) * N + h) * H;
        const oo = ((b * T + t) * N + h) * Hv;
        let max = Number.NEGATIVE_INFINITY;
        for (let j = 0; j < S; j++) {
          const ko = ((b * S + j) * K + kh) * H;
          let dot = 0;
          for (let d = 0; d < H; d++) dot += qa[qo + d] * ka[ko + d];
          s[j] = scale * dot;
          const kept = m.mask ? m.mask(b, h, t, j) : true;
          z[j] = kept ? (m.score ? m.score(s[j], b, h, t, j) : s[j]) : Number.NEGATIVE_INFINITY;
          max = Math.max(max, z[j]);
        }
        if (max === Number.NEGATIVE_INFINITY) {
          logSumExp[(b * T + t) * N + h] = Number.NEGATIVE_INFINITY;
          continue;
        }
        let sum = 0;
        for (let j = 0; j < S; j++) {
          p[j] = Math.exp(z[j] - max);
          sum += p[j];
        }
        for (let j = 0; j < S; j++) p[j] /= sum;
        logSumExp[(b * T + t) * N + h] = max + Math.log(sum);
        for (let j = 0; j < S; j++) {
          if (p[j] === 0) continue;
          const vo = ((b * S + j) * K + kh) * Hv;
          for (let d = 0; d < Hv; d++) output[oo + d] += p[j] * va[vo + d];
        }
        let D = 0;
        for (let d = 0; d < Hv; d++) D += ga[oo + d] * output[oo + d];
        for (let j = 0; j < S; j++) {
          if (p[j] === 0) continue;
          const vo = ((b * S + j) * K + kh) * Hv;
          const ko = ((b * S + j) * K + kh) * H;
          let dp = 0;
          for (let d = 0; d < Hv; d++) {
            dp += ga[oo + d] * va[vo + d];
            dValue[vo + d] += p[j] * ga[oo + d];
          }
          const dz = p[j] * (dp - D);
          if (m.captureGrad) m.captureGrad(dz, b, h, t, j, dCaptures);
          const ds = dz * (m.scoreGrad ? m.scoreGrad(s[j], b, h, t, j) : 1);
          for (let d = 0; d < H; d++) {
            dQuery[qo + d] += scale * ds * ka[ko + d];
            dKey[ko + d] += scale * ds * qa[qo + d];
          }
        }
      }
    }
  return { output, logSumExp, dQuery, dKey, dValue, dCaptures };
}
