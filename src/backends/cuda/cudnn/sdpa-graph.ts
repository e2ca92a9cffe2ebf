/**
 * The two SDPA graphs cuDNN 9.14–9.19 runs on its fused flash engine, built from SdpaFeatures:
 *
 * - unified: one OPERATION_SDPA_FWD node (Q, K, V, O, scale, optional Stats and, from 9.15,
 *   sequence lengths). Non-causal, no bias, no window.
 * - composite: the node sequence cudnn-frontend emits before 9.21, which cuDNN pattern-matches onto
 *   the same engine: Q·Kᵀ → ×scale → +bias → padding mask → right bound (causal) → left bound →
 *   softmax with its statistics → P·V. The order and the per-op data types follow cudnn-frontend,
 *   since the matcher recognises exactly that shape.
 *
 * Memory layout: attnlab keeps (B,T,N,H); cuDNN's logical order is [b,h,s,d], so Q is declared
 * [B,N,T,H] with strides [T·N·H, H, N·H, 1] — a view, no copy. Paged and packed inputs (paged.ts)
 * take the composite graph with the padding mask.
 */

import type { SdpaFeatures } from './features.js';
import { GraphBuilder, type GraphDType, type GraphSpec } from './graph-spec.js';
import { graphOperands } from './paged.js';
import { scoreMasks } from './score-masks.js';

/** The graph for `f`. Deterministic: the same features give the same uids and op order. */
export function buildSdpaGraph(f: SdpaFeatures): GraphSpec {
  const g = new GraphBuilder();
  const io: GraphDType = f.dtype === 'float16' ? 'half' : 'bfloat16';
  const { B, T, N } = f;
  // Q, K, V, O: dense, packed or paged (paged.ts); a paged K or V is loaded where it is used.
  const operands = graphOperands(g, f, io);
  const { query: q, output: o } = operands;
  const composite = f.graph === 'composite';
  const rowDims = [B, N, T, 1];
  const rowStrides = [N * T, T, 1, 1];
  let stats: number | undefined;
  if (f.stats !== 'none') {
    const strides = f.stats === 'btn' ? [T * N, 1, N, 1] : rowStrides;
    stats = g.io('Stats', 'float', rowDims, strides, { kind: 'stats' });
  }
  const lengths = f.padding
    ? {
        q: g.io('seq_len_q', 'int32', [B, 1, 1, 1], [1, 1, 1, 1], { kind: 'seqLenQ' }),
        kv: g.io('seq_len_kv', 'int32', [B, 1, 1, 1], [1, 1, 1, 1], { kind: 'seqLenKv' }),
      }
    : null;

  if (!composite) {
    const [k, v] = [operands.key(lengths?.kv), operands.value(lengths?.kv)];
    const scale = g.scalar('attn_scale', { kind: 'scale' }, 1);
    const tables = operands.pageTables;
    g.op({
      kind: 'sdpa',
      q,
      k,
      v,
      o,
      scale,
      stats,
      seqLenQ: lengths?.q,
      seqLenKv: lengths?.kv,
      pageTableK: tables?.k,
      pageTableV: tables?.v,
    });
    return g.build();
  }

  const m = scoreMasks(g, f);
  // 1. S = Q·Kᵀ, × scale, + bias.
  const k = operands.key(lengths?.kv);
  const bmm1 = m.score('S');
  g.op({ kind: 'matmul', a: q, b: k, c: bmm1, mOverride: lengths?.q, nOverride: lengths?.kv });
  let s = m.pointwise('S_scaled', 'mul', 'float', bmm1, g.scalar('attn_scale', { kind: 'scale' }));
  if (f.bias) {
    const bias = g.io('bias', io, f.bias.dims, f.bias.strides, { kind: 'bias' });
    s = m.pointwise('S_bias', 'add', 'float', s, bias);
  }
  // 2–4. Padding, then the right (causal) and left bounds.
  s = m.bounds(m.padding(s, lengths), lengths);

  // 5. Softmax with its statistics. The LOG/ADD branch is required even when nobody reads Stats:
  //    without it the engine's pattern matcher finds no config (verified on 9.14 and 9.19).
  const row = (name: string) => g.virtual(name, 'float', rowDims, rowStrides);
  const max = row('max');
  g.op({ kind: 'reduction', operator: 'max', x: s, y: max });
  const shifted = m.pointwise('S_minus_max', 'sub', 'float', s, max);
  const exp = m.pointwise('exp', 'exp', 'float', shifted);
  const sum = row('sum_exp');
  g.op({ kind: 'reduction', operator: 'add', x: exp, y: sum });
  const logSum = row('log_sum_exp');
  g.op({ kind: 'pointwise', mode: 'log', precision: 'float', x: sum, y: logSum });
  const lse = stats ?? row('Stats');
  g.op({ kind: 'pointwise', mode: 'add', precision: 'float', x: max, b: logSum, y: lse });
  // P feeds the second matmul in the I/O dtype: cuDNN's engine has no config with a float P.
  const p = m.pointwise('P', 'div', 'float', exp, sum, { dtype: io });

  // 6. O = P·V.
  const v = operands.value(lengths?.kv);
  g.op({ kind: 'matmul', a: p, b: v, c: o, mOverride: lengths?.q, kOverride: lengths?.kv });
  return g.build();
}
