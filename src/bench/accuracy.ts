/**
 * The benchmark's error column: max |output − float64 attention| over checked query rows, computed
 * from the very (rounded) inputs the backend received. Small problems check every row of every
 * (b, n). Large ones check 4 rows (the first, the last and two between) of up to 8 (b, n) pairs
 * spread over the batch and heads, reading only those slices of the tensors: at T=16384 decoding
 * and checking everything would cost seconds of host time per row of a sweep.
 */
import type { ProblemSize } from '../backends/problem.js';
import { type DType, decodeValue, type RawArray } from '../tensor/dtype.js';

export interface OracleShape extends ProblemSize {
  readonly causal: boolean;
  readonly scale: number;
}

/** Host storage of a (B, len, heads, H) tensor: raw values and their dtype. */
export interface RawTensor {
  readonly data: RawArray;
  readonly dtype: DType;
}

/** Multiply-adds above which only sampled rows are checked: ~0.1 s of float64 work in V8. */
export const FULL_CHECK_LIMIT = 4e7;
/** Query rows checked per sampled (b, n) pair. */
export const SAMPLED_ROWS = 4;
/** (b, n) pairs checked when sampling. */
export const SAMPLED_PAIRS = 8;

export interface CheckPlan {
  /** [b, n] pairs to check. */
  readonly pairs: readonly (readonly [number, number])[];
  /** Query rows to check in each pair. */
  readonly rows: readonly number[];
  readonly full: boolean;
}

/** Which (b, n) pairs and query rows the check covers, and whether that is everything. */
export function checkPlan(shape: OracleShape): CheckPlan {
  const { B, T, S, N, H } = shape;
  if (B * N * T * S * 2 * H <= FULL_CHECK_LIMIT) {
    const pairs: [number, number][] = [];
    for (let b = 0; b < B; b++) for (let n = 0; n < N; n++) pairs.push([b, n]);
    return { pairs, rows: Array.from({ length: T }, (_, t) => t), full: true };
  }
  return {
    pairs: spread(B * N, SAMPLED_PAIRS).map((i) => [Math.floor(i / N), i % N]),
    rows: spread(T, SAMPLED_ROWS),
    full: false,
  };
}

/** Up to `count` distinct indices of 0…length−1, evenly spread and including both ends. */
export function spread(length: number, count: number): number[] {
  if (length <= count) return Array.from({ length }, (_, i) => i);
  return [...new Set(Array.from({ length: count }, (_, i) => Math.round((i * (length - 1)) / (count - 1))))];
}

/** Positions 0…len−1 of head `head` of batch `b` in a (B, len, heads, H) tensor, decoded: (len·H). */
function slice(t: RawTensor, b: number, len: number, heads: number, head: number, H: number): Float64Array {
  const out = new Float64Array(len * H);
  for (let s = 0; s < len; s++) {
    const base = ((b * len + s) * heads + head) * H;
    for (let h = 0; h < H; h++) out[s * H + h] = decodeValue(t.data[base + h], t.dtype);
  }
  return out;
}

/**
 * Max |out − reference| over the planned rows. q (B,T,N,H), k and v (B,S,K,H), out (B,T,N,H);
 * causal masking is top-left (query t sees keys s ≤ t), the alignment attnlab, JAX and PyTorch
 * share by default. NaN if the output holds a NaN at a checked element.
 */
export function maxErrorAgainstOracle(
  shape: OracleShape,
  q: RawTensor,
  k: RawTensor,
  v: RawTensor,
  out: RawTensor,
): { maxError: number; full: boolean } {
  const { T, S, N, K, H, causal, scale } = shape;
  const plan = checkPlan(shape);
  const group = N / K;
  const logits = new Float64Array(S);
  const acc = new Float64Array(H);
  const kv = new Map<string, [Float64Array, Float64Array]>();
  let maxError = 0;
  for (const [b, n] of plan.pairs) {
    const kvHead = Math.floor(n / group);
    const key = `${b},${kvHead}`;
    if (!kv.has(key)) kv.set(key, [slice(k, b, S, K, kvHead, H), slice(v, b, S, K, kvHead, H)]);
    const [ks, vs] = kv.get(key)!;
    const qs = slice(q, b, T, N, n, H);
    const os = slice(out, b, T, N, n, H);
    for (const t of plan.rows) {
      const visible = causal ? Math.min(S, t + 1) : S;
      let max = Number.NEGATIVE_INFINITY;
      for (let s = 0; s < visible; s++) {
        let dot = 0;
        for (let h = 0; h < H; h++) dot += qs[t * H + h] * ks[s * H + h];
        logits[s] = dot * scale;
        if (logits[s] > max) max = logits[s];
      }
      acc.fill(0);
      let sum = 0;
      for (let s = 0; s < visible; s++) {
        const p = Math.exp(logits[s] - max);
        sum += p;
        for (let h = 0; h < H; h++) acc[h] += p * vs[s * H + h];
      }
      for (let h = 0; h < H; h++) {
        const diff = Math.abs(os[t * H + h] - (visible === 0 ? 0 : acc[h] / sum));
        if (Number.isNaN(diff)) return { maxError: Number.NaN, full: plan.full };
        if (diff > maxError) maxError = diff;
      }
    }
  }
  return { maxError, full: plan.full };
}
