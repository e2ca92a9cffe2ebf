/**
 * FlashAttention-2's backward on the CPU, the algorithm the fused GPU kernels use:
 *
 *   0. D[row] = dO[row] · O[row]   (preprocessing: O and dO only, no scores)
 *   1. for each key block (dK, dV accumulate for that block only)
 *        for each query block that can see it:
 *          S = scale·Q·Kᵀ + bias (masked), P = exp(S − lse)   recomputed from the saved log-sum-exp
 *          dV += Pᵀ·dO;  dP = dO·Vᵀ;  dS = P∘(dP − D)
 *          dK += scale·dSᵀ·Q;  dQ += scale·dS·K   (dQ accumulated across key blocks)
 *
 * Nothing of size (T, S) is held: one BLOCK_Q × BLOCK_K tile at a time. Float64 arithmetic, so with
 * a float64 log-sum-exp (what the CPU keeps for float64 inputs) it matches the reference to ~1e-15.
 * Query blocks that see none of a key block (causal, window, padding) are skipped. With a score modifier
 * f, dS is taken back through f at the pre-modifier score (learned captures gain their gradient there);
 * maskMod drops pairs as the forward does (through the block mask when one is given).
 */

import { NO_PLAN } from '../backend.js';
import type { BackwardBackend } from '../backward-backend.js';
import type { BackwardOutput, BackwardProblem } from '../backward-problem.js';
import { gradientBuffers, gradientTensors } from './gradients.js';
import { keyRange, pairKeep, pairTerms, tileEmpty } from './visibility.js';

/** 16 queries × 64 keys, as the forward (flash.ts): the tile and its K/V rows stay in L1. */
const BLOCK_Q = 16;
const BLOCK_K = 64;

/** D = rowsum(dO ∘ O), (B,T,N). */
function rowDots(p: BackwardProblem): Float64Array {
  const o = p.output.toFloat64Array();
  const dO = p.dOutput.toFloat64Array();
  const rows = p.B * p.T * p.N;
  const D = new Float64Array(rows);
  for (let r = 0; r < rows; r++) {
    let dot = 0;
    for (let h = 0; h < p.Hv; h++) dot += dO[r * p.Hv + h] * o[r * p.Hv + h];
    D[r] = dot;
  }
  return D;
}

export function flashBackwardCpu(p: BackwardProblem): BackwardOutput {
  const { B, T, S, N, K, H, Hv, scale } = p;
  const q = p.query.toFloat64Array();
  const k = p.key.toFloat64Array();
  const v = p.value.toFloat64Array();
  const dO = p.dOutput.toFloat64Array();
  const lse = p.logSumExp.toFloat64Array();
  const D = rowDots(p);
  const terms = pairTerms(p);
  const [ms, bs] = [terms.maskStrides, terms.biasStrides];
  const scoreMod = p.modifiers?.scoreMod;
  const scoreModGrad = p.modifiers?.scoreModGrad;
  const keep = pairKeep(p);
  const empty = tileEmpty(p);
  const g = gradientBuffers(p);
  const captureGrads = g.dcaptures ?? [];
  const dK = new Float64Array(BLOCK_K * H);
  const dV = new Float64Array(BLOCK_K * Hv);
  const lo = new Int32Array(T);
  const hi = new Int32Array(T);
  const group = N / K;

  for (let b = 0; b < B; b++) {
    for (let i = 0; i < T; i++) ({ lo: lo[i], hi: hi[i] } = keyRange(p, b, i));
    for (let n = 0; n < N; n++) {
      const kh = Math.floor(n / group);
      for (let j0 = 0; j0 < S; j0 += BLOCK_K) {
        const cols = Math.min(BLOCK_K, S - j0);
        dK.fill(0);
        dV.fill(0);
        for (let i0 = 0; i0 < T; i0 += BLOCK_Q) {
          const rows = Math.min(BLOCK_Q, T - i0);
          let seen = false;
          for (let r = 0; r < rows && !seen; r++)
            seen = lo[i0 + r] < Math.min(hi[i0 + r], j0 + cols) && hi[i0 + r] > j0;
          if (!seen || empty(b, n, i0, i0 + rows, j0, j0 + cols)) continue;
          for (let r = 0; r < rows; r++) {
            const i = i0 + r;
            const row = (b * T + i) * N + n;
            const rowLse = lse[row];
            if (rowLse === Number.NEGATIVE_INFINITY) continue; // an empty row: zero gradients
            const qOff = row * H;
            const oOff = row * Hv;
            const maskRow = b * ms[0] + n * ms[1] + i * ms[2];
            const biasRow = b * bs[0] + n * bs[1] + i * bs[2];
            const first = Math.max(lo[i], j0);
            const end = Math.min(hi[i], j0 + cols);
            for (let j = first; j < end; j++) {
              if (terms.mask && !terms.mask[maskRow + j * ms[3]]) continue;
              if (keep && !keep(b, n, i, j)) continue;
              const kOff = ((b * S + j) * K + kh) * H;
              const vOff = ((b * S + j) * K + kh) * Hv;
              let dot = 0;
              for (let h = 0; h < H; h++) dot += q[qOff + h] * k[kOff + h];
              const s = dot * scale + (terms.bias ? terms.bias[biasRow + j * bs[3]] : 0);
              const P = Math.exp((scoreMod ? scoreMod(s, b, n, i, j) : s) - rowLse);
              if (P === 0) continue;
              let dP = 0;
              for (let h = 0; h < Hv; h++) dP += dO[oOff + h] * v[vOff + h];
              let dS = P * (dP - D[row]);
              // The chain rule through the score modifier, at the score before it.
              if (scoreModGrad) dS = scoreModGrad(s, dS, b, n, i, j, captureGrads);
              const c = j - j0;
              for (let h = 0; h < Hv; h++) dV[c * Hv + h] += P * dO[oOff + h];
              const dLogit = scale * dS;
              for (let h = 0; h < H; h++) {
                dK[c * H + h] += dLogit * q[qOff + h];
                g.dq[qOff + h] += dLogit * k[kOff + h];
              }
              if (g.dbias) g.dbias[biasRow + j * bs[3]] += dS;
            }
          }
        }
        // The key block's sums go to its KV head: the G query heads of a group add up there.
        for (let c = 0; c < cols; c++) {
          const kOff = ((b * S + j0 + c) * K + kh) * H;
          const vOff = ((b * S + j0 + c) * K + kh) * Hv;
          for (let h = 0; h < H; h++) g.dk[kOff + h] += dK[c * H + h];
          for (let h = 0; h < Hv; h++) g.dv[vOff + h] += dV[c * Hv + h];
        }
      }
    }
  }
  return gradientTensors(p, g, `cpu-flash-backward-f64-q${BLOCK_Q}-k${BLOCK_K}`);
}

export const cpuFlashBackward: BackwardBackend = {
  name: 'flash',
  device: 'cpu',
  layouts: ['modifiers'],
  plan: () => NO_PLAN,
  run: (_plan, p) => flashBackwardCpu(p),
};
