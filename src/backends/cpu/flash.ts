/**
 * FlashAttention's algorithm on the CPU: queries in blocks, keys and values streamed in blocks, an
 * online softmax (running max m, running sum l, rescaled accumulator), output and log-sum-exp written
 * once per row. The (B,N,T,S) scores are never held, only one BLOCK_Q × BLOCK_K tile of them.
 *
 * It exists to show the algorithm with the same results as the reference (float64 arithmetic, so they
 * agree to ~1e-15) and to run the codelab's default shape (B=4,T=128,N=8,H=64) in tens of milliseconds.
 * Key blocks outside every row's visible range (causal, window, padding) are skipped, not masked.
 * Modifiers (src/variants/) are evaluated per element: scoreMod after the bias, maskMod through the block
 * mask when one is given (its empty blocks drop pairs unevaluated, its full ones keep them).
 */

import { allocFloat64, allocHost } from '../../tensor/checks.js';
import { Tensor } from '../../tensor/tensor.js';
import { type AttentionBackend, NO_PLAN } from '../backend.js';
import type { AttentionProblem, BackendOutput } from '../problem.js';
import { runDense } from './dense-view.js';
import { keyRange, pairKeep, pairTerms, tileEmpty } from './visibility.js';

/** 16 query rows × 64 keys: a 1024-entry score tile, small enough to stay in L1 with its Q rows. */
const BLOCK_Q = 16;
const BLOCK_K = 64;

export function flashAttentionCpu(p: AttentionProblem): BackendOutput {
  const { B, T, S, N, K, H, Hv, scale } = p;
  const q = p.query.toFloat64Array();
  const k = p.key.toFloat64Array();
  const v = p.value.toFloat64Array();
  const terms = pairTerms(p);
  const [ms, bs] = [terms.maskStrides, terms.biasStrides];
  const scoreMod = p.modifiers?.scoreMod;
  const keep = pairKeep(p);
  const empty = tileEmpty(p);
  const out = allocFloat64([B, T, N, Hv]);
  const lse = (allocHost('float32', [B, T, N]) as Float32Array).fill(Number.NEGATIVE_INFINITY);
  const group = N / K;
  const tile = new Float64Array(BLOCK_Q * BLOCK_K);
  const rowMax = new Float64Array(BLOCK_Q);
  const rowSum = new Float64Array(BLOCK_Q);
  const acc = new Float64Array(BLOCK_Q * Hv);
  const lo = new Int32Array(BLOCK_Q);
  const hi = new Int32Array(BLOCK_Q);

  for (let b = 0; b < B; b++) {
    for (let n = 0; n < N; n++) {
      const kh = Math.floor(n / group);
      for (let i0 = 0; i0 < T; i0 += BLOCK_Q) {
        const rows = Math.min(BLOCK_Q, T - i0);
        let blockLo = S;
        let blockHi = 0;
        for (let r = 0; r < rows; r++) {
          const range = keyRange(p, b, i0 + r);
          lo[r] = range.lo;
          hi[r] = range.hi;
          if (range.lo < range.hi) {
            blockLo = Math.min(blockLo, range.lo);
            blockHi = Math.max(blockHi, range.hi);
          }
        }
        rowMax.fill(Number.NEGATIVE_INFINITY);
        rowSum.fill(0);
        acc.fill(0);
        // Only key blocks that some row can see are visited.
        for (let j0 = blockLo - (blockLo % BLOCK_K); j0 < blockHi; j0 += BLOCK_K) {
          const cols = Math.min(BLOCK_K, S - j0);
          // A tile the block mask leaves empty adds nothing: skipped, as the GPU kernels skip it.
          if (empty(b, n, i0, i0 + rows, j0, j0 + cols)) continue;
          for (let r = 0; r < rows; r++) {
            const i = i0 + r;
            const qOff = ((b * T + i) * N + n) * H;
            const maskRow = b * ms[0] + n * ms[1] + i * ms[2];
            const biasRow = b * bs[0] + n * bs[1] + i * bs[2];
            let tileMax = Number.NEGATIVE_INFINITY;
            for (let c = 0; c < cols; c++) {
              const j = j0 + c;
              let s = Number.NEGATIVE_INFINITY;
              if (
                j >= lo[r] &&
                j < hi[r] &&
                (!terms.mask || terms.mask[maskRow + j * ms[3]]) &&
                (!keep || keep(b, n, i, j))
              ) {
                const kOff = ((b * S + j) * K + kh) * H;
                let dot = 0;
                for (let h = 0; h < H; h++) dot += q[qOff + h] * k[kOff + h];
                s = dot * scale + (terms.bias ? terms.bias[biasRow + j * bs[3]] : 0);
                if (scoreMod) s = scoreMod(s, b, n, i, j);
              }
              tile[r * BLOCK_K + c] = s;
              tileMax = Math.max(tileMax, s); // propagates NaN: a NaN logit makes the row NaN
            }
            const newMax = Math.max(rowMax[r], tileMax);
            if (newMax === Number.NEGATIVE_INFINITY) continue; // nothing visible yet
            // Rescale what was accumulated under the old max, then add this tile's terms.
            const correction = Math.exp(rowMax[r] - newMax);
            rowSum[r] *= correction;
            const accRow = r * Hv;
            for (let h = 0; h < Hv; h++) acc[accRow + h] *= correction;
            for (let c = 0; c < cols; c++) {
              // A masked key (logit −inf) adds nothing whatever V holds; a visible one adds w·v even
              // when w underflows to 0, as IEEE arithmetic does (0 · NaN is NaN).
              const s = tile[r * BLOCK_K + c];
              if (s === Number.NEGATIVE_INFINITY) continue;
              const w = Math.exp(s - newMax);
              rowSum[r] += w;
              const vOff = ((b * S + j0 + c) * K + kh) * Hv;
              for (let h = 0; h < Hv; h++) acc[accRow + h] += w * v[vOff + h];
            }
            rowMax[r] = newMax;
          }
        }
        for (let r = 0; r < rows; r++) {
          // An empty row stays zero with lse −inf; a NaN sum (a NaN or +inf logit) gives a NaN row.
          if (rowSum[r] === 0) continue;
          const oOff = ((b * T + i0 + r) * N + n) * Hv;
          for (let h = 0; h < Hv; h++) out[oOff + h] = acc[r * Hv + h] / rowSum[r];
          lse[(b * T + i0 + r) * N + n] = rowMax[r] + Math.log(rowSum[r]);
        }
      }
    }
  }
  return {
    output: Tensor.fromArray(out, [B, T, N, Hv], p.dtype),
    logSumExp: p.returnLogSumExp ? Tensor.fromRaw(lse, [B, T, N], 'float32') : undefined,
    variant: `cpu-flash-f64-q${BLOCK_Q}-k${BLOCK_K}`,
  };
}

export const cpuFlashBackend: AttentionBackend = {
  name: 'flash',
  device: 'cpu',
  layouts: ['paged', 'packed', 'modifiers'],
  plan: () => NO_PLAN,
  run: (_plan, p) => runDense(p, flashAttentionCpu),
};
