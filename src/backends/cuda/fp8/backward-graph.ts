/**
 * cuDNN's FP8 SDPA backward graph (composite, per-tensor scales), in the node order cudnn-frontend's
 * SDPAFP8BackwardNode and its MatmulFP8Node emit (read from cudnn-frontend's source; not copied):
 *
 *   D   = rowsum(dO8 ∘ O8) · descale_dO · descale_O                     (virtual, float)
 *   S   = Q8·K8ᵀ · attn_scale · descale_q · descale_k   [padding] [causal]
 *   P   = exp(S − Stats);  P8 = e4m3(P · scale_s)                         (Q's type)
 *   dV  = P8ᵀ·dO8 · descale_s · descale_dO  [Σ group];  amax_dV;  dV8 = fp8(dV · scale_dV)
 *   dS  = (dO8·V8ᵀ · descale_dO · descale_v − D) ∘ P · attn_scale;  amax_dP;  dS8 = fp8(dS · scale_dP)
 *   dQ  = dS8·K8 · descale_dP · descale_k;  amax_dQ;  dQ8 = fp8(dQ · scale_dQ)
 *   dK  = dS8ᵀ·Q8 · descale_dP · descale_q  [Σ group];  amax_dK;  dK8 = fp8(dK · scale_dK)
 *
 * fp8 is the gradient type: e5m2 under TE's HYBRID format, e4m3 under E4M3 (dO8, dS8 and the three
 * gradients share it, as cudnn-frontend types dS8 like dO). Each amax is taken before its scale, as
 * the forward's amax_o. Unlike the bf16 backward graph, D stays virtual (no softmax-sum scratch) and
 * the masks come before the statistics are subtracted. Q8, O8, dO8 and dQ8 are attnlab's (B,T,N,H)
 * memory declared as cuDNN's [b,h,s,d]; K8 and V8 are given as transposed views, K re-viewed for dQ.
 */
import type { ProblemSize } from '../../problem.js';
import { contiguousStrides, GraphBuilder, type GraphDType } from '../cudnn/graph-spec.js';
import type { Fp8Graph, Fp8MemoryRole, Fp8Role } from './graph.js';
import { fp8ScoreSteps } from './score-steps.js';

/** Slots (16 bytes each) of the backward's scalar block, shared with src/kernels/fp8/gradients.cu. */
export const BACKWARD_SLOTS = {
  descaleQ: 0,
  descaleK: 1,
  descaleV: 2,
  descaleO: 3,
  descaleDO: 4,
  descaleS: 5,
  descaleDP: 6,
  scaleS: 7,
  scaleDP: 8,
  scaleDQ: 9,
  scaleDK: 10,
  scaleDV: 11,
  amaxDQ: 12,
  amaxDK: 13,
  amaxDV: 14,
  amaxDP: 15,
  /** The kernels' slots: dO's scale and amax (quantising dO before the graph). */
  scaleDO: 16,
  amaxDO: 17,
} as const;
export type BackwardScalarName = keyof typeof BACKWARD_SLOTS;
export const BACKWARD_BLOCK_BYTES = 18 * 16;

/** What the FP8 backward graph depends on: the cache key of its plan. Hv = H. */
export interface Fp8BackwardFeatures extends ProblemSize {
  readonly causal: boolean;
  readonly padding: boolean;
  /** The type of dO8, dS8 and the gradients. */
  readonly gradient: 'fp8_e5m2' | 'fp8_e4m3';
}

/** (B,T,N,D) memory as cuDNN's logical [b, heads, len, d]. */
function bshd(heads: number, len: number, d: number): number[] {
  return [len * heads * d, d, heads * d, 1];
}

export function buildFp8BackwardGraph(f: Fp8BackwardFeatures): Fp8Graph {
  const g = new GraphBuilder();
  const roles = new Map<number, Fp8Role>();
  const { B, T, S, N, K, H, gradient } = f;
  // The builder's bindings are the bf16 graphs' kinds; execution reads `roles` (see graph.ts).
  const io = (name: string, dtype: GraphDType, dims: number[], strides: number[], kind: Fp8MemoryRole) => {
    const uid = g.io(name, dtype, dims, strides, { kind: 'output' });
    roles.set(uid, { kind });
    return uid;
  };
  // One tensor per scalar, however many ops read it (descale_dO, descale_q, … are read twice).
  const scalars = new Map<BackwardScalarName, number>();
  const scalar = (name: BackwardScalarName) => {
    const known = scalars.get(name);
    if (known !== undefined) return known;
    const uid = g.io(name, 'float', [1, 1, 1, 1], [1, 1, 1, 1], { kind: 'output' });
    roles.set(uid, { kind: 'scalar', slot: BACKWARD_SLOTS[name] });
    scalars.set(name, uid);
    return uid;
  };
  const kStrides = bshd(K, S, H);
  const transposed = [kStrides[0], kStrides[1], kStrides[3], kStrides[2]];
  const q = io('Q8', 'fp8_e4m3', [B, N, T, H], bshd(N, T, H), 'q8');
  const kT = io('K8^T', 'fp8_e4m3', [B, K, H, S], transposed, 'k8');
  const vT = io('V8^T', 'fp8_e4m3', [B, K, H, S], transposed, 'v8');
  const o = io('O8', 'fp8_e4m3', [B, N, T, H], bshd(N, T, H), 'o8');
  const dO = io('dO8', gradient, [B, N, T, H], bshd(N, T, H), 'dO8');
  const rowDims = [B, N, T, 1];
  const rowStrides = [N * T, T, 1, 1];
  const stats = io('Stats', 'float', rowDims, rowStrides, 'stats');
  const dQ = io('dQ8', gradient, [B, N, T, H], bshd(N, T, H), 'dQ8');
  const dK = io('dK8', gradient, [B, K, S, H], kStrides, 'dK8');
  const dV = io('dV8', gradient, [B, K, S, H], kStrides, 'dV8');
  const lengths = f.padding
    ? {
        q: io('seq_len_q', 'int32', [B, 1, 1, 1], [1, 1, 1, 1], 'seqLenQ'),
        kv: io('seq_len_kv', 'int32', [B, 1, 1, 1], [1, 1, 1, 1], 'seqLenKv'),
      }
    : null;
  const attnScale = g.scalar('attn_scale', { kind: 'scale' });
  roles.set(attnScale, { kind: 'attnScale' });

  const { scoreDims, scoreStrides, pointwise, masks } = fp8ScoreSteps(g, roles, f);
  const mul = (name: string, x: number, b: number, dims?: number[], dtype?: GraphDType) =>
    pointwise(name, 'mul', 'float', x, b, { dims, dtype });

  // D = rowsum(dO8 ∘ O8), descaled: the softmax-gradient row sums, kept on chip.
  const dOO = mul('dO_O', dO, o, [B, N, T, H]);
  const rowSum = g.virtual('dO_O_sum', 'float', rowDims, rowStrides);
  g.op({ kind: 'reduction', operator: 'add', x: dOO, y: rowSum });
  const descaledSum = mul('dO_O_sum_descale_dO', rowSum, scalar('descaleDO'), rowDims);
  const softmaxSum = mul('softmax_sum', descaledSum, scalar('descaleO'), rowDims);

  // P = exp(S − Stats) over the forward's masks.
  const bmm1 = g.virtual('S', 'float', scoreDims, scoreStrides);
  g.op({ kind: 'matmul', a: q, b: kT, c: bmm1, mOverride: lengths?.q, nOverride: lengths?.kv });
  let s = mul('S_scaled', bmm1, attnScale);
  s = mul('S_descale_q', s, scalar('descaleQ'));
  s = mul('S_descale_k', s, scalar('descaleK'));
  s = masks(s, lengths, f.causal);
  const p = pointwise('P', 'exp', 'float', pointwise('S_minus_stats', 'sub', 'float', s, stats));
  const p8 = mul('P8', p, scalar('scaleS'), scoreDims, 'fp8_e4m3');

  // Key-major views [B,N,S,T] of a (B,N,T,S) score tensor, in `dtype`.
  const keyMajor = (name: string, x: number, dtype: GraphDType) => {
    const y = g.virtual(name, dtype, [B, N, S, T], [N * T * S, T * S, 1, S]);
    g.op({ kind: 'reshape', x, y });
    return y;
  };
  /**
   * cudnn-frontend's MatmulFP8Node: c = fp8((a·b [Σ over each query-head group]) · descaleA ·
   * descaleB · scale) and its amax before the scale. `heads` is the output's head count.
   */
  const matmulFp8 = (
    name: string,
    a: number,
    b: number,
    descales: readonly [number, number],
    scale: number,
    out: number,
    amax: number,
    rows: number,
    overrides: { mOverride?: number; kOverride?: number },
  ) => {
    const perQueryHead = [B, N, rows, H];
    const product = g.virtual(`${name}_product`, 'float', perQueryHead, contiguousStrides(perQueryHead));
    g.op({ kind: 'matmul', a, b, c: product, ...overrides });
    const heads = g.tensor(out).dims[1];
    let x = product;
    if (heads !== N) {
      const grouped = [B, heads, rows, H];
      x = g.virtual(`${name}_group_sum`, 'float', grouped, contiguousStrides(grouped));
      g.op({ kind: 'reduction', operator: 'add', x: product, y: x });
    }
    const dims = [B, heads, rows, H];
    x = mul(`${name}_descale_a`, x, descales[0], dims);
    x = mul(`${name}_descale_b`, x, descales[1], dims);
    g.op({ kind: 'pointwise', mode: 'mul', precision: 'float', x, b: scale, y: out });
    g.op({ kind: 'reduction', operator: 'amax', x, y: amax });
  };
  const keyOverrides = { mOverride: lengths?.kv, kOverride: lengths?.q };
  const queryOverrides = { mOverride: lengths?.q, kOverride: lengths?.kv };

  // dV = P8ᵀ·dO8.
  const pT = keyMajor('P8^T', p8, 'fp8_e4m3');
  matmulFp8(
    'dV',
    pT,
    dO,
    [scalar('descaleS'), scalar('descaleDO')],
    scalar('scaleDV'),
    dV,
    scalar('amaxDV'),
    S,
    keyOverrides,
  );

  // dS = (dO8·V8ᵀ − D) ∘ P · attn_scale, then its amax and dS8.
  const bmmDP = g.virtual('dO_V', 'float', scoreDims, scoreStrides);
  g.op({ kind: 'matmul', a: dO, b: vT, c: bmmDP, mOverride: lengths?.q, nOverride: lengths?.kv });
  let dS = mul('dO_V_descale_dO', bmmDP, scalar('descaleDO'));
  dS = mul('dO_V_descale_v', dS, scalar('descaleV'));
  dS = pointwise('dP_minus_sum', 'sub', 'float', dS, softmaxSum);
  dS = mul('dS', dS, p);
  dS = mul('dS_scaled', dS, attnScale);
  g.op({ kind: 'reduction', operator: 'amax', x: dS, y: scalar('amaxDP') });
  const dS8 = mul('dS8', dS, scalar('scaleDP'), scoreDims, gradient);

  // dQ = dS8·K8, with K re-viewed from the Kᵀ view.
  const k = g.virtual('K8', 'fp8_e4m3', [B, K, S, H], kStrides);
  g.op({ kind: 'reshape', x: kT, y: k });
  matmulFp8(
    'dQ',
    dS8,
    k,
    [scalar('descaleDP'), scalar('descaleK')],
    scalar('scaleDQ'),
    dQ,
    scalar('amaxDQ'),
    T,
    queryOverrides,
  );

  // dK = dS8ᵀ·Q8.
  const dST = keyMajor('dS8^T', dS8, gradient);
  matmulFp8(
    'dK',
    dST,
    q,
    [scalar('descaleDP'), scalar('descaleQ')],
    scalar('scaleDK'),
    dK,
    scalar('amaxDK'),
    S,
    keyOverrides,
  );
  return { spec: g.build(), roles };
}
