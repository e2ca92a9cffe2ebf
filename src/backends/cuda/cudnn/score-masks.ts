/**
 * The score-mask steps of cuDNN's composite SDPA graphs, shared by the forward graph (sdpa-graph.ts)
 * and the backward graph (sdpa-backward-graph.ts), so that both mask exactly alike: padding through
 * the sequence-length tensors, then the right bound (causal) and the left bound of a window, each a
 * BINARY_SELECT of −inf over generated row/column indices as cudnn-frontend emits them. The steps
 * the FP8 graphs build alike (pointwise, select, indices, padding) are score-steps.ts.
 */
import type { SdpaFeatures } from './features.js';
import type { GraphBuilder } from './graph-spec.js';
import { type LengthTensors, scoreSteps } from './score-steps.js';

/** Masks and bounds over the (B,N,T,S) score tensors of one graph (score-steps.ts), with its bounds. */
export function scoreMasks(g: GraphBuilder, f: SdpaFeatures) {
  const { T, S } = f;
  const { score, pointwise, select, indices, padding } = scoreSteps(g, f);
  const constant = (name: string, dtype: 'float' | 'int32', value: number) =>
    g.scalar(name, { kind: 'constant', dtype, value });

  /** The right bound (causal), then the left bound of a window. */
  const bounds = (scores: number, lengths: LengthTensors | null): number => {
    let s = scores;
    // Right bound (causal is right = 0): keep i + d + right ≥ j, with d = S_b − T_b when bottom-right.
    const bottomRight = f.alignment === 'bottom_right';
    if (f.right !== null) {
      let { row, col } = indices('right', s);
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
      let { row, col } = indices('left', s);
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
