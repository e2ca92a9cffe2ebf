/**
 * cuDNN's FP8 SDPA forward graph (composite; the unified op takes no FP8 on 9.14–9.19), as
 * cudnn-frontend v1.23 emits it (CompositeSDPANode + MatmulFP8Node) and as it ran from Node.js on
 * the H200: 18 ops, 22 with causal, 28 with causal and padding:
 *
 *   S  = Q8·K8ᵀ · attn_scale · descale_q · descale_k     [padding mask] [causal mask]
 *   P  = softmax(S) (with the mandatory LOG/ADD statistics branch, virtual)
 *   amax_s = max|P|;  P8 = e4m3(P · scale_s)
 *   X  = P8·V8 · descale_s · descale_v;  amax_o = max|X|;  O8 = e4m3(X · scale_o)
 *
 * Q8, K8, V8 and O8 are (B,T,N,H)-ordered e4m3 memory declared as cuDNN's [b,h,s,d]. The six scales
 * and two amax values are device scalars in the scalar block of src/kernels/fp8/quantise.cu.
 */
import type { AttentionProblem, ProblemSize } from '../../problem.js';
import { GraphBuilder, type GraphDType, type GraphSpec } from '../cudnn/graph-spec.js';
import { fp8ScoreSteps } from './score-steps.js';

/** Slots of the scalar block (16 bytes each), shared with quantise.cu's SLOT numbers. */
export const SCALAR_SLOTS = {
  descaleQ: 0,
  descaleK: 1,
  descaleV: 2,
  descaleS: 3,
  scaleS: 4,
  scaleO: 5,
  amaxS: 6,
  amaxO: 7,
  scaleQ: 8,
  scaleK: 9,
  scaleV: 10,
  amaxQ: 11,
  amaxK: 12,
  amaxV: 13,
} as const;
export type ScalarName = keyof typeof SCALAR_SLOTS;
export const SCALAR_BLOCK_BYTES = 14 * 16;

/** What the FP8 graph depends on: the cache key of its plan. */
export interface Fp8GraphFeatures extends ProblemSize {
  readonly causal: boolean;
  readonly padding: boolean;
  /**
   * Write the softmax statistics (log-sum-exp, float32 (B,N,T)) to memory, for the FP8 backward;
   * otherwise they stay virtual (the branch itself is required by the engine either way).
   */
  readonly stats?: boolean;
}

export function fp8GraphFeatures(p: AttentionProblem): Fp8GraphFeatures {
  const { B, T, S, N, K, H, causal } = p;
  return { B, T, S, N, K, H, causal, padding: p.querySeqLengths !== null || p.keyValueSeqLengths !== null };
}

/** Device tensors of the FP8 graphs (forward and backward), by what they hold. */
export type Fp8MemoryRole =
  | 'q8'
  | 'k8'
  | 'v8'
  | 'o8'
  | 'stats'
  | 'seqLenQ'
  | 'seqLenKv'
  | 'dO8'
  | 'dQ8'
  | 'dK8'
  | 'dV8';

/** What each non-virtual uid is bound to at execute time; a scalar's slot is in its graph's block. */
export type Fp8Role =
  | { readonly kind: Fp8MemoryRole }
  | { readonly kind: 'scalar'; readonly slot: number }
  | { readonly kind: 'attnScale' }
  | { readonly kind: 'negativeInfinity' };

export interface Fp8Graph {
  readonly spec: GraphSpec;
  readonly roles: ReadonlyMap<number, Fp8Role>;
}

/**
 * The graph for `f`. The builder's bindings cover Q/K/V/O, lengths and by-value scalars; the FP8
 * scalars, which its binding kinds do not name, are recorded in `roles` (the one map execution reads).
 */
/**
 * How Q8, K8, V8 and O8 lie in memory: 'bshd' is attnlab's (B,T,N,H) order; 'bhsd' puts each head's
 * rows together. Both run at the same speed on the H200 (benchmarks/harnesses/cudnn-engine-configs.ts); a
 * transposed V (sequence innermost) crashed cuDNN 9.19's FP8 engine there, so it is not offered.
 */
export type Fp8Layout = 'bshd' | 'bhsd';

export interface Fp8GraphOptions {
  readonly layout?: Fp8Layout;
  /** O's dtype: e4m3 (what Hopper's engines take), or bfloat16 (Blackwell's; tried by experiments). */
  readonly output?: 'fp8_e4m3' | 'bfloat16';
}

/** Strides of logical [b, heads, len, d] in memory order `order`. */
function stridesOf(order: Fp8Layout, heads: number, len: number, d: number): number[] {
  return order === 'bshd' ? [len * heads * d, d, heads * d, 1] : [heads * len * d, len * d, d, 1];
}

export function buildFp8Graph(f: Fp8GraphFeatures, options: Fp8GraphOptions = {}): Fp8Graph {
  const { layout = 'bshd', output = 'fp8_e4m3' } = options;
  const g = new GraphBuilder();
  const roles = new Map<number, Fp8Role>();
  const { B, T, S, N, K, H } = f;
  // The builder asks each memory tensor for a binding of the bf16 backend's kinds; the FP8 graph's
  // execution reads `roles` instead, so the nearest kind is given ('output' for the FP8 scalars).
  const nearest = {
    q8: 'query',
    k8: 'key',
    v8: 'value',
    o8: 'output',
    stats: 'stats',
    seqLenQ: 'seqLenQ',
    seqLenKv: 'seqLenKv',
  } as const;
  const io = (
    name: string,
    dims: number[],
    strides: number[],
    role: { readonly kind: keyof typeof nearest },
    dtype: GraphDType = 'fp8_e4m3',
  ) => {
    const uid = g.io(name, dtype, dims, strides, { kind: nearest[role.kind] });
    roles.set(uid, role);
    return uid;
  };
  const scalar = (name: ScalarName) => {
    // A device scalar is an ordinary (non-virtual, not by-value) [1,1,1,1] float tensor.
    const uid = g.io(name, 'float', [1, 1, 1, 1], [1, 1, 1, 1], { kind: 'output' });
    roles.set(uid, { kind: 'scalar', slot: SCALAR_SLOTS[name] });
    return uid;
  };
  const kStrides = stridesOf(layout, K, S, H);
  const q = io('Q8', [B, N, T, H], stridesOf(layout, N, T, H), { kind: 'q8' });
  const kT = io('K8^T', [B, K, H, S], [kStrides[0], kStrides[1], kStrides[3], kStrides[2]], { kind: 'k8' });
  const v = io('V8', [B, K, S, H], stridesOf(layout, K, S, H), { kind: 'v8' });
  const o = io('O8', [B, N, T, H], stridesOf(layout, N, T, H), { kind: 'o8' }, output);
  const lengths = f.padding
    ? {
        q: io('seq_len_q', [B, 1, 1, 1], [1, 1, 1, 1], { kind: 'seqLenQ' }, 'int32'),
        kv: io('seq_len_kv', [B, 1, 1, 1], [1, 1, 1, 1], { kind: 'seqLenKv' }, 'int32'),
      }
    : null;

  const { scoreDims, scoreStrides, pointwise, masks } = fp8ScoreSteps(g, roles, f);

  // 1. S = Q8·K8ᵀ, then the attention scale and the two input descales.
  const bmm1 = g.virtual('S', 'float', scoreDims, scoreStrides);
  g.op({ kind: 'matmul', a: q, b: kT, c: bmm1, mOverride: lengths?.q, nOverride: lengths?.kv });
  const attnScale = g.scalar('attn_scale', { kind: 'scale' });
  roles.set(attnScale, { kind: 'attnScale' });
  let s = pointwise('S_scaled', 'mul', 'float', bmm1, attnScale);
  s = pointwise('S_descale_q', 'mul', 'float', s, scalar('descaleQ'));
  s = pointwise('S_descale_k', 'mul', 'float', s, scalar('descaleK'));

  // 2. Padding, then 3. causal (top-left: keep row ≥ col).
  s = masks(s, lengths, f.causal);

  // 4. Softmax; the statistics branch is required by the engine's pattern matcher even unread.
  const rowDims = [B, N, T, 1];
  const rowStrides = [N * T, T, 1, 1];
  const row = (name: string) => g.virtual(name, 'float', rowDims, rowStrides);
  const max = row('max');
  g.op({ kind: 'reduction', operator: 'max', x: s, y: max });
  const exp = pointwise('exp', 'exp', 'float', pointwise('S_minus_max', 'sub', 'float', s, max));
  const sum = row('sum_exp');
  g.op({ kind: 'reduction', operator: 'add', x: exp, y: sum });
  const logSum = row('log_sum_exp');
  g.op({ kind: 'pointwise', mode: 'log', precision: 'float', x: sum, y: logSum });
  const stats = f.stats ? io('Stats', rowDims, rowStrides, { kind: 'stats' }, 'float') : row('Stats');
  g.op({ kind: 'pointwise', mode: 'add', precision: 'float', x: max, b: logSum, y: stats });
  const p = pointwise('P', 'div', 'float', exp, sum);

  // 5. amax of P, then P8 = e4m3(P · scale_s) feeds the second FP8 matmul.
  g.op({ kind: 'reduction', operator: 'amax', x: p, y: scalar('amaxS') });
  const p8 = pointwise('P8', 'mul', 'float', p, scalar('scaleS'), { dtype: 'fp8_e4m3' });

  // 6. X = P8·V8 (float, [B,N,T,H] row-major as cudnn-frontend infers it), descaled; O8 = e4m3(X·scale_o).
  const outDims = [B, N, T, H];
  const outStrides = [N * T * H, T * H, H, 1];
  const x = g.virtual('X', 'float', outDims, outStrides);
  g.op({ kind: 'matmul', a: p8, b: v, c: x, mOverride: lengths?.q, kOverride: lengths?.kv });
  const descaled = pointwise('X_descale_s', 'mul', 'float', x, scalar('descaleS'), { dims: outDims });
  const x2 = pointwise('X_descale_v', 'mul', 'float', descaled, scalar('descaleV'), { dims: outDims });
  g.op({ kind: 'pointwise', mode: 'mul', precision: 'float', x: x2, b: scalar('scaleO'), y: o });
  g.op({ kind: 'reduction', operator: 'amax', x: x2, y: scalar('amaxO') });
  return { spec: g.build(), roles };
}
