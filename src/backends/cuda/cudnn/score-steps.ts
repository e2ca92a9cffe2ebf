/**
 * The steps every cuDNN attention graph builds over its (B,N,T,S) scores, written once: a pointwise
 * op into a new virtual tensor, the BINARY_SELECT of −inf, generated row/column indices, and the
 * padding mask through the sequence-length tensors, in cudnn-frontend's order. The bf16/fp16 graphs
 * (score-masks.ts: causal, windows, bottom-right bounds) and the FP8 graphs (../fp8/score-steps.ts:
 * top-left causal) build their masks from these, so all four graphs mask alike.
 */
import type { ProblemSize } from '../../problem.js';
import { contiguousStrides, type GraphBuilder, type GraphDType, type PointwiseMode } from './graph-spec.js';

/** The sequence-length tensors of a padded graph. */
export interface LengthTensors {
  readonly q: number;
  readonly kv: number;
}

export interface PointwiseOptions {
  readonly dtype?: GraphDType;
  readonly t?: number;
  readonly axis?: number;
  /** An existing tensor to write, instead of a new virtual one. */
  readonly into?: number;
  /** The new tensor's dims (row-major), when not the scores'. */
  readonly dims?: number[];
}

/**
 * `onNegativeInfinity` sees the uid of every −inf fill constant as it is made (the FP8 graphs record
 * it in their `roles` map, from which their execution binds every non-virtual uid).
 */
export function scoreSteps(g: GraphBuilder, f: ProblemSize, onNegativeInfinity?: (uid: number) => void) {
  const { B, N, T, S } = f;
  const scoreDims = [B, N, T, S];
  const scoreStrides = contiguousStrides(scoreDims);
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
    const dtype = options.dtype ?? 'float';
    const y =
      options.into ??
      (options.dims
        ? g.virtual(name, dtype, options.dims, contiguousStrides(options.dims))
        : score(name, dtype));
    g.op({ kind: 'pointwise', mode, precision, x, b, t: options.t, y, axis: options.axis });
    return y;
  };
  const select = (name: string, x: number, keep: number): number => {
    const fill = g.scalar(`${name}_fill`, {
      kind: 'constant',
      dtype: 'float',
      value: Number.NEGATIVE_INFINITY,
    });
    onNegativeInfinity?.(fill);
    return pointwise(name, 'binary_select', 'float', x, fill, { t: keep });
  };
  /** `${prefix}_row` and `${prefix}_col`: each score's row (axis 2) and column (axis 3), as int32. */
  const indices = (prefix: string, scores: number) => ({
    row: pointwise(`${prefix}_row`, 'gen_index', 'float', scores, undefined, { dtype: 'int32', axis: 2 }),
    col: pointwise(`${prefix}_col`, 'gen_index', 'float', scores, undefined, { dtype: 'int32', axis: 3 }),
  });
  /** Rows ≥ T_b and keys ≥ S_b to −inf. Needs the matmul overrides too: either alone runs and
   *  silently returns wrong results, as measured on the H200. */
  const padding = (scores: number, lengths: LengthTensors | null): number => {
    if (!lengths) return scores;
    const row = pointwise('pad_row', 'gen_index', 'int32', scores, undefined, { dtype: 'int32', axis: 2 });
    const col = pointwise('pad_col', 'gen_index', 'int32', scores, undefined, { dtype: 'int32', axis: 3 });
    const rowOk = pointwise('pad_row_ok', 'cmp_lt', 'boolean', row, lengths.q, { dtype: 'boolean' });
    const colOk = pointwise('pad_col_ok', 'cmp_lt', 'boolean', col, lengths.kv, { dtype: 'boolean' });
    const keep = pointwise('pad_keep', 'logical_and', 'boolean', rowOk, colOk, { dtype: 'boolean' });
    return select('pad_select', scores, keep);
  };
  return { scoreDims, scoreStrides, score, pointwise, select, indices, padding };
}
