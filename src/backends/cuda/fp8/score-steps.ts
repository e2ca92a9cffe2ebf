/**
 * The score masks of the FP8 forward graph (graph.ts) and the FP8 backward graph (backward-graph.ts):
 * padding through the sequence-length tensors, then causal (top-left: keep row ≥ col), in
 * cudnn-frontend's order, so both graphs mask exactly alike. The steps themselves are the ones every
 * cuDNN graph builds (../cudnn/score-steps.ts); here each −inf fill is recorded in `roles`, the one
 * map the FP8 execution binds every non-virtual uid from.
 */
import type { ProblemSize } from '../../problem.js';
import type { GraphBuilder } from '../cudnn/graph-spec.js';
import { type LengthTensors, scoreSteps } from '../cudnn/score-steps.js';

/** Where the graph records the role of each uid it binds (its `roles` map of Fp8Role). */
export interface RoleRecorder {
  set(uid: number, role: { readonly kind: 'negativeInfinity' }): unknown;
}

export function fp8ScoreSteps(g: GraphBuilder, roles: RoleRecorder, f: ProblemSize) {
  const { scoreDims, scoreStrides, pointwise, select, indices, padding } = scoreSteps(g, f, (fill) =>
    roles.set(fill, { kind: 'negativeInfinity' }),
  );
  /** Padding needs both these ops and the matmul overrides (either alone is silently wrong). */
  const masks = (scores: number, lengths: LengthTensors | null, causal: boolean): number => {
    const s = padding(scores, lengths);
    if (!causal) return s;
    const { row, col } = indices('causal', s);
    const keep = pointwise('causal_keep', 'cmp_ge', 'boolean', row, col, { dtype: 'boolean' });
    return select('causal_select', s, keep);
  };
  return { scoreDims, scoreStrides, pointwise, masks };
}
