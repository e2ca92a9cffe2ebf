/**
 * The score-mask steps of cuDNN's composite SDPA graphs, shared by the forward graph (sdpa-graph.ts)
 * and the backward graph (sdpa-backward-graph.ts), so that both mask exactly alike: padding through
 * the sequence-length tensors, then the right bound (causal) and the left bound of a window, each a
 * BINARY_SELECT of −inf over generated row/column indices as cudnn-frontend emits them.
 */
import type { SdpaFeatures } from './features.js';
import type { GraphBuilder, GraphDType, PointwiseMode } from './graph-spec.js';

/** The sequence-length tensors of a padded graph. */
export interface LengthTensors {
  readonly q: number;
  readonly kv: number;
}

export interface PointwiseOptions {
  readonly dtype?: GraphDType;
  readonly t?: number;
  readonly axis?: number;
  readonly into?: number;
}

/** Helpers over the (B,N,T,S) score tensors of one graph. */
export function scoreMasks(g: GraphBuilder, f: SdpaFeatures) {
  const { B, N, T, S } = f;
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
    options: PointwiseOptions = {},
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

  /** Rows ≥ T_b and keys ≥ S_b to −inf (with the matmul overrides: either alone runs and silently
   *  returns wrong results, as measured on the H200). */
  const padding = (scores: number, lengths: LengthTensors | null): number => {
    if (!lengths) return scores;
    const row = pointwise('pad_row', 'gen_index', 'int32', scores, undefined, { dtype: 'int32', axis: 2 });
    const col = pointwise('pad_col', 'gen_index', 'int32', scores, undefined, { dtype: 'int32', axis: 3 });
    const rowOk = pointwise('pad_row_ok', 'cmp_lt', 'boolean', row, lengths.q, { dtype: 'boolean' });
    const colOk = pointwise('pad_col_ok', 'cmp_lt', 'boolean', col, lengths.kv, { dtype: 'boolean' });
    const keep = pointwise('pad_keep', 'logical_and', 'boolean', rowOk, colOk, { dtype: 'boolean' });
    return select('pad_select', scores, keep);
  };

  /** The right bound (causal), then the left bound of a window. */
  const bounds = (scores: number, lengths: LengthTensors | null): number => {
    let s = scores;
    // Right bound (causal is right = 0): keep i + d + right ≥ j, with d = S_b − T_b when bottom-right.
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

    // Left bound: keep j + (left + 1) − d > i. cudnn-frontend's "window" counts the diagonal,
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
    return s;
  };

  return { score, pointwise, select, constant, padding, bounds };
}
