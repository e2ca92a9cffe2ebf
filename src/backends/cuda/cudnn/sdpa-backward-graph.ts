/**
 * cuDNN's SDPA backward as a composite graph: the node sequence cudnn-frontend's SDPA backward node
 * emits, which cuDNN pattern-matches onto its fused flash backward engine (cudnn-frontend has no
 * unified backward node, and the SDPA_BWD operation of 9.17+ takes no causal mask before 9.21).
 *
 *   softmaxSum = rowsum(dO ∘ O) · 1                      (float32, in the call's memory)
 *   S  = Q·Kᵀ · scale (+ bias) → padding → − Stats → right/left bounds → exp = P
 *   dV = Pᵀ·dO                   (GQA: per query head, then summed over each group)
 *   dS = (dO·Vᵀ − softmaxSum) ∘ P;  dBias = Σ dS over its broadcast dims
 *   dK = (dS·scale)ᵀ·Q            (GQA as dV)
 *   dQ = (dS·scale)·K             through a float32 accumulator and an identity op, or straight
 *                                 (directDQ: cuDNN's dP-workspace path, deterministic, needed for dBias)
 *
 * Stats is subtracted before the causal and window masks, and the masks are the forward's own
 * (score-masks.ts). Layouts as in the forward (sdpa-graph.ts): attnlab's (B,T,N,H) memory declared
 * in cuDNN's [b,h,s,d] order through strides; Kᵀ and Vᵀ are transposed views; the reshapes re-view
 * Pᵀ, dSᵀ and K. Data types follow cudnn-frontend: float32 intermediates, Pᵀ and dSᵀ in the I/O type.
 */
import type { SdpaFeatures } from './features.js';
import { GraphBuilder, type GraphDType, type GraphSpec } from './graph-spec.js';
import { scoreMasks } from './score-masks.js';

export interface SdpaBackwardFeatures extends SdpaFeatures {
  readonly pass: 'backward';
  /** dQ written by its matmul directly (deterministic; required with dBias), not accumulated. */
  readonly directDQ: boolean;
}

export function buildSdpaBackwardGraph(f: SdpaBackwardFeatures): GraphSpec {
  const g = new GraphBuilder();
  const io: GraphDType = f.dtype === 'float16' ? 'half' : 'bfloat16';
  const { B, T, S, N, K, H, Hv } = f;
  const m = scoreMasks(g, f);
  const q = g.io('Q', io, [B, N, T, H], [T * N * H, H, N * H, 1], { kind: 'query' });
  const kT = g.io('K^T', io, [B, K, H, S], [S * K * H, H, 1, K * H], { kind: 'key' });
  const vT = g.io('V^T', io, [B, K, Hv, S], [S * K * Hv, Hv, 1, K * Hv], { kind: 'value' });
  const o = g.io('O', io, [B, N, T, Hv], [T * N * Hv, Hv, N * Hv, 1], { kind: 'output' });
  const dO = g.io('dO', io, [B, N, T, Hv], [T * N * Hv, Hv, N * Hv, 1], { kind: 'dOutput' });
  // attnlab's log-sum-exp is (B,T,N): the 'btn' strides of the forward's Stats.
  const stats = g.io('Stats', 'float', [B, N, T, 1], [T * N, 1, N, 1], { kind: 'stats' });
  const dQ = g.io('dQ', io, [B, N, T, H], [T * N * H, H, N * H, 1], { kind: 'dQuery' });
  const dK = g.io('dK', io, [B, K, S, H], [S * K * H, H, K * H, 1], { kind: 'dKey' });
  const dV = g.io('dV', io, [B, K, S, Hv], [S * K * Hv, Hv, K * Hv, 1], { kind: 'dValue' });
  const lengths = f.padding
    ? {
        q: g.io('seq_len_q', 'int32', [B, 1, 1, 1], [1, 1, 1, 1], { kind: 'seqLenQ' }),
        kv: g.io('seq_len_kv', 'int32', [B, 1, 1, 1], [1, 1, 1, 1], { kind: 'seqLenKv' }),
      }
    : null;
  const rowDims = [B, N, T, 1];
  const rowStrides = [N * T, T, 1, 1];
  const scale = g.scalar('attn_scale', { kind: 'scale' });

  // softmaxSum = rowsum(dO ∘ O) · 1 (the · 1 is dropout's inverse scale slot, kept for the matcher).
  const dOO = g.virtual('dO_O', 'float', [B, N, T, Hv], [N * T * Hv, T * Hv, Hv, 1]);
  g.op({ kind: 'pointwise', mode: 'mul', precision: 'float', x: dO, b: o, y: dOO });
  const rowDot = g.virtual('dO_O_sum', 'float', rowDims, rowStrides);
  g.op({ kind: 'reduction', operator: 'add', x: dOO, y: rowDot });
  const softmaxSum = g.io('softmax_sum', 'float', rowDims, rowStrides, { kind: 'softmaxSum' });
  const one = g.scalar('one', { kind: 'constant', dtype: 'float', value: 1 });
  g.op({ kind: 'pointwise', mode: 'mul', precision: 'float', x: rowDot, b: one, y: softmaxSum });

  // P = exp(S − Stats), masked as the forward masks.
  const bmm1 = m.score('S');
  g.op({ kind: 'matmul', a: q, b: kT, c: bmm1, mOverride: lengths?.q, nOverride: lengths?.kv });
  let s = m.pointwise('S_scaled', 'mul', 'float', bmm1, scale);
  if (f.bias) {
    const bias = g.io('bias', io, f.bias.dims, f.bias.strides, { kind: 'bias' });
    s = m.pointwise('S_bias', 'add', 'float', s, bias);
  }
  s = m.padding(s, lengths);
  s = m.pointwise('S_minus_stats', 'sub', 'float', s, stats);
  s = m.bounds(s, lengths);
  const p = m.pointwise('P', 'exp', 'float', s);

  // Key-major views: [B,N,S,T] over the (B,N,T,S) score layout, in the I/O type.
  const transposed = (name: string) => g.virtual(name, io, [B, N, S, T], [N * T * S, T * S, 1, S]);
  /** d = xᵀ·y into `out` (B,K,S,D), summed over each group of G = N/K query heads when K < N. */
  const keyGradient = (name: string, xT: number, y: number, out: number, D: number) => {
    const overrides = { mOverride: lengths?.kv, kOverride: lengths?.q };
    if (K === N) {
      g.op({ kind: 'matmul', a: xT, b: y, c: out, ...overrides });
      return;
    }
    const full = g.virtual(`${name}_per_query_head`, io, [B, N, S, D], [N * S * D, S * D, D, 1]);
    g.op({ kind: 'matmul', a: xT, b: y, c: full, ...overrides });
    g.op({ kind: 'reduction', operator: 'add', x: full, y: out });
  };
  const pT = transposed('P^T');
  g.op({ kind: 'reshape', x: p, y: pT });
  keyGradient('dV', pT, dO, dV, Hv);

  // dS = (dO·Vᵀ − softmaxSum) ∘ P.
  const dP = m.score('dP');
  g.op({ kind: 'matmul', a: dO, b: vT, c: dP, mOverride: lengths?.q, nOverride: lengths?.kv });
  const centered = m.pointwise('dP_minus_sum', 'sub', 'float', dP, softmaxSum);
  const dS = m.pointwise('dS', 'mul', 'float', centered, p);
  if (f.bias) {
    const dBias = g.io('dBias', io, f.bias.dims, f.bias.strides, { kind: 'dBias' });
    g.op({ kind: 'reduction', operator: 'add', x: dS, y: dBias });
  }
  const dSScaled = m.pointwise('dS_scaled', 'mul', 'float', dS, scale);

  const dST = transposed('dS^T');
  g.op({ kind: 'reshape', x: dSScaled, y: dST });
  keyGradient('dK', dST, q, dK, H);

  // dQ = dS·K, with K re-viewed from the Kᵀ view.
  const k = g.virtual('K', io, [B, K, S, H], [S * K * H, H, K * H, 1]);
  g.op({ kind: 'reshape', x: kT, y: k });
  const dQOverrides = { mOverride: lengths?.q, kOverride: lengths?.kv };
  if (f.directDQ) {
    g.op({ kind: 'matmul', a: dSScaled, b: k, c: dQ, ...dQOverrides });
  } else {
    const accum = g.io('dQ_accum', 'float', [B, N, T, H], [N * T * H, T * H, H, 1], { kind: 'dQueryAccum' });
    g.op({ kind: 'matmul', a: dSScaled, b: k, c: accum, ...dQOverrides });
    g.op({ kind: 'pointwise', mode: 'identity', precision: 'float', x: accum, y: dQ });
  }
  return g.build();
}
