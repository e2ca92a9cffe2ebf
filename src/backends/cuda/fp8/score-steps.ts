/**
 * The steps the FP8 forward graph (graph.ts) and the FP8 backward graph (backward-graph.ts) build
 * alike over their (B,N,T,S) scores: a pointwise op into a new virtual tensor, the BINARY_SELECT of
 * −inf, and the score masks — padding through the sequence-length tensors, then causal (top-left:
 * keep row ≥ col) — in cudnn-frontend's order, so both graphs mask exactly alike. The −inf fill is
 * recorded in `roles`, the one map the FP8 execution binds every non-virtual uid from.
 * (The bf16 graphs' masks, with windows and bottom-right bounds, are ../cudnn/score-masks.ts.)
 */
import type { ProblemSize } from '../../problem.js';
import {
  contiguousStrides,
  type GraphBuilder,
  type GraphDType,
  type PointwiseMode,
} from '../cudnn/graph-spec.js';

export interface PointwiseOptions {
  readonly dtype?: GraphDType;
  readonly t?: number;
  readonly axis?: number;
  /** The output's dims (row-major), when not the scores'. */
  readonly dims?: number[];
}

/** The sequence-length tensors of a padded graph. */
export interface LengthTensors {
  readonly q: number;
  readonly kv: number;
}

/** Where the graph records the role of each uid it binds (its `roles` map of Fp8Role). */
export interface RoleRecorder {
  set(uid: number, role: { readonly kind: 'negativeInfinity' }): unknown;
}

export function fp8ScoreSteps(g: GraphBuilder, roles: RoleRecorder, f: ProblemSize) {
  const { B, N, T, S } = f;
  const scoreDims = [B, N, T, S];
  const scoreStrides = contiguousStrides(scoreDims);
  const pointwise = (
    name: string,
    mode: PointwiseMode,
    precision: GraphDType,
    x: number,
    b?: number,
    o: PointwiseOptions = {},
  ): number => {
    const dims = o.dims ?? scoreDims;
    const y = g.virtual(name, o.dtype ?? 'float', dims, contiguousStrides(dims));
    g.op({ kind: 'pointwise', mode, precision, x, b, t: o.t, y, axis: o.axis });
    return y;
  };
  const select = (name: string, x: number, keep: number): number => {
    const fill = g.scalar(`${name}_fill`, {
      kind: 'constant',
      dtype: 'float',
      value: Number.NEGATIVE_INFINITY,
    });
    roles.set(fill, { kind: 'negativeInfinity' });
    return pointwise(name, 'binary_select', 'float', x, fill, { t: keep });
  };
  /** Padding needs both these ops and the matmul overrides (either alone is silently wrong). */
  const masks = (scores: number, lengths: LengthTensors | null, causal: boolean): number => {
    let s = scores;
    if (lengths) {
      const row = pointwise('pad_row', 'gen_index', 'int32', s, undefined, { dtype: 'int32', axis: 2 });
      const col = pointwise('pad_col', 'gen_index', 'int32', s, undefined, { dtype: 'int32', axis: 3 });
      const rowOk = pointwise('pad_row_ok', 'cmp_lt', 'boolean', row, lengths.q, { dtype: 'boolean' });
      const colOk = pointwise('pad_col_ok', 'cmp_lt', 'boolean', col, lengths.kv, { dtype: 'boolean' });
      const keep = pointwise('pad_keep', 'logical_and', 'boolean', rowOk, colOk, { dtype: 'boolean' });
      s = select('pad_select', s, keep);
    }
    if (causal) {
      const row = pointwise('causal_row', 'gen_index', 'float', s, undefined, { dtype: 'int32', axis: 2 });
      const col = pointwise('causal_col', 'gen_index', 'float', s, undefined, { dtype: 'int32', axis: 3 });
      const keep = pointwise('causal_keep', 'cmp_ge', 'boolean', row, col, { dtype: 'boolean' });
      s = select('causal_select', s, keep);
    }
    return s;
  };
  return { scoreDims, scoreStrides, pointwise, masks };
}
