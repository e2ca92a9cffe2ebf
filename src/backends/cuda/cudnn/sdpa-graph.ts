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
 * [B,N,T,H] with strides [T·N·H, H, N·H, 1] — a view, no copy.
 */

import type { SdpaFeatures } from './features.js';
import { GraphBuilder, type GraphDType, type GraphSpec, type PointwiseMode } from './graph-spec.js';

/** The graph for `f`. Deterministic: the same features give the same uids and op order. */
export function buildSdpaGraph(f: SdpaFeatures): GraphSpec {
  const g = new GraphBuilder();
  const io: GraphDType = f.dtype === 'float16' ? 'half' : 'bfloat16';
  const { B, T, S, N, K, H, Hv } = f;
  const q = g.io('Q', io, [B, N, T, H], [T * N * H, H, N * H, 1], { kind: 'query' });
  const composite = f.graph === 'composite';
  // The composite graph multiplies by Kᵀ, declared as a transposed view of the same memory.
  const k = composite
    ? g.io('K^T', io, [B, K, H, S], [S * K * H, H, 1, K * H], { kind: 'key' })
    : g.io('K', io, [B, K, S, H], [S * K * H, H, K * H, 1], { kind: 'key' });
  const v = g.io('V', io, [B, K, S, Hv], [S * K * Hv, Hv, K * Hv, 1], { kind: 'value' });
  const o = g.io('O', io, [B, N, T, Hv], [T * N * Hv, Hv, N * Hv, 1], { kind: 'output' });
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
    const scale = g.scalar('attn_scale', { kind: 'scale' }, 1);
    g.op({ kind: 'sdpa', q, k, v, o, scale, stats, seqLenQ: lengths?.q, seqLenKv: lengths?.kv });
    return g.build();
  }

  const scoreDims = [B, N, T, S];
  const scoreStrides = [N * T * S, T * S, S, 1];
  const score = (name: string, dtype: GraphDType = 'float') =>
    g.virtual(name, dtype, scoreDims, scoreStrides);
  const pointwise = (
    name: string,
    mode: PointwiseMode,
    precision: GraphDType,
    x: number,
    b?: number,
    options: { dtype?: GraphDType; t?: number; axis?: number; into?: number } = {},
  ): number => {
    const y = options.into ?? score(name, options.dtype ?? 'float');
    g.op({ kind: 'pointwise', mode, precision, x, b, t: options.t, y, axis: options.axis });
    return y;
  };
  const select = (name: string, x: number, keep: number): number => {
    const negativeInfinity = g.scalar(`${name}_fill`, { kind: 'constant', dtype: 'float', value: -Infinity });
    return pointwise(name, 'binary_select', 'float', x, negativeInfinity, { t: keep });
  };
  const constant = (name: string, dtype: 'float' | 'int32', value: number) =>
    g.scalar(name, { kind: 'constant', dtype, value });

  // 1. S = Q·Kᵀ, × scale, + bias.
  const bmm1 = score('S');
  g.op({ kind: 'matmul', a: q, b: k, c: bmm1, mOverride: lengths?.q, nOverride: lengths?.kv });
  let s = pointwise('S_scaled', 'mul', 'float', bmm1, g.scalar('attn_scale', { kind: 'scale' }));
  if (f.bias) {
    const bias = g.io('bias', io, f.bias.dims, f.bias.strides, { kind: 'bias' });
    s = pointwise('S_bias', 'add', 'float', s, bias);
  }

  // 2. Padding: rows ≥ T_b and keys ≥ S_b are masked (with the matmul overrides above: either alone
  //    runs and silently returns wrong results, as measured on the H200).
  if (lengths) {
    const row = pointwise('pad_row', 'gen_index', 'int32', s, undefined, { dtype: 'int32', axis: 2 });
    const col = pointwise('pad_col', 'gen_index', 'int32', s, undefined, { dtype: 'int32', axis: 3 });
    const rowOk = pointwise('pad_row_ok', 'cmp_lt', 'boolean', row, lengths.q, { dtype: 'boolean' });
    const colOk = pointwise('pad_col_ok', 'cmp_lt', 'boolean', col, lengths.kv, { dtype: 'boolean' });
    const keep = pointwise('pad_keep', 'logical_and', 'boolean', rowOk, colOk, { dtype: 'boolean' });
    s = select('pad_select', s, keep);
  }

  // 3. Right bound (causal is right = 0): keep i + d + right ≥ j, with d = S_b − T_b when bottom-right.
  const bottomRight = f.alignment === 'bottom_right';
  if (f.right !== null) {
    let row = pointwise('right_row', 'gen_index', 'float', s, undefined, { dtype: 'int32', axis: 2 });
    const col = pointwise('right_col', 'gen_index', 'float', s, undefined, { dtype: 'int32', axis: 3 });
    if (bottomRight) {
      const kv = lengths ? lengths.kv : constant('right_s_kv', 'int32', S);
      const sq = lengths ? lengths.q : constant('right_s_q', 'int32', T);
      row = pointwise('right_row_plus_skv', 'add', 'int32', row, kv, { dtype: 'int32', axis: 3 });
      row = pointwise('right_row_minus_sq', 'sub', 'int32', row, sq, { dtype: 'int32', axis: 3 });
    }
    if (f.right !== 0) {
      const shift = constant('right_bound', 'int32', f.right);
      row = pointwise('right_row_plus_bound', 'add', 'int32', row, shift, { dtype: 'int32', axis: 3 });
    }
    const keep = pointwise('right_keep', 'cmp_ge', 'boolean', row, col, { dtype: 'boolean' });
    s = select('right_select', s, keep);
  }

  // 4. Left bound: keep j + (left + 1) − d > i. cudnn-frontend's "window" counts the diagonal,
  //    so its bound is our left + 1.
  if (f.left !== null) {
    const row = pointwise('left_row', 'gen_index', 'float', s, undefined, { dtype: 'int32', axis: 2 });
    let col = pointwise('left_col', 'gen_index', 'float', s, undefined, { dtype: 'int32', axis: 3 });
    const window = f.left + 1;
    if (!bottomRight || !lengths) {
      const offset = bottomRight ? window - S + T : window;
      col = pointwise('left_col_plus_bound', 'add', 'float', col, constant('left_bound', 'float', offset), {
        axis: 3,
      });
    } else {
      const bound = constant('left_bound', 'int32', window);
      col = pointwise('left_col_plus_bound', 'add', 'int32', col, bound, { dtype: 'int32', axis: 3 });
      col = pointwise('left_col_minus_skv', 'sub', 'int32', col, lengths.kv, { dtype: 'int32', axis: 3 });
      col = pointwise('left_col_plus_sq', 'add', 'int32', col, lengths.q, { dtype: 'int32', axis: 3 });
    }
    const keep = pointwise('left_keep', 'cmp_gt', 'boolean', col, row, { dtype: 'boolean' });
    s = select('left_select', s, keep);
  }

  // 5. Softmax with its statistics. The LOG/ADD branch is required even when nobody reads Stats:
  //    without it the engine's pattern matcher finds no config (verified on 9.14 and 9.19).
  const row = (name: string) => g.virtual(name, 'float', rowDims, rowStrides);
  const max = row('max');
  g.op({ kind: 'reduction', operator: 'max', x: s, y: max });
  const shifted = pointwise('S_minus_max', 'sub', 'float', s, max);
  const exp = pointwise('exp', 'exp', 'float', shifted);
  const sum = row('sum_exp');
  g.op({ kind: 'reduction', operator: 'add', x: exp, y: sum });
  const logSum = row('log_sum_exp');
  g.op({ kind: 'pointwise', mode: 'log', precision: 'float', x: sum, y: logSum });
  const lse = stats ?? row('Stats');
  g.op({ kind: 'pointwise', mode: 'add', precision: 'float', x: max, b: logSum, y: lse });
  // P feeds the second matmul in the I/O dtype: cuDNN's engine has no config with a float P.
  const p = pointwise('P', 'div', 'float', exp, sum, { dtype: io });

  // 6. O = P·V.
  g.op({ kind: 'matmul', a: p, b: v, c: o, mOverride: lengths?.q, kOverride: lengths?.kv });
  return g.build();
}
