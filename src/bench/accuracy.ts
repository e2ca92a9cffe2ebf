/**
 * The benchmark's error column: max |output − float64 attention| over query rows, computed from the
 * very (rounded) inputs the backend received. Small problems check every row; large ones check a
 * few rows of every (b, n) — the first, the last and evenly spaced ones between — so a 16K-token
 * sweep still gets an error number in well under a second of host time.
 */

export interface OracleShape {
  readonly B: number;
  readonly T: number;
  readonly S: number;
  readonly N: number;
  readonly K: number;
  readonly H: number;
  readonly causal: boolean;
  readonly scale: number;
}

/** Multiply-adds above which only sampled rows are checked: ~0.1 s of float64 work in V8. */
export const FULL_CHECK_LIMIT = 4e7;
/** Query rows checked per (b, n) when sampling. */
export const SAMPLED_ROWS = 4;

/** The query rows to check for each (b, n), and whether that is all of them. */
export function checkedRows(shape: OracleShape): { rows: number[]; full: boolean } {
  const { B, T, S, N, H } = shape;
  if (B * N * T * S * 2 * H <= FULL_CHECK_LIMIT || T <= SAMPLED_ROWS) {
    return { rows: Array.from({ length: T }, (_, t) => t), full: true };
  }
  const rows = new Set<number>();
  for (let i = 0; i < SAMPLED_ROWS; i++) rows.add(Math.round((i * (T - 1)) / (SAMPLED_ROWS - 1)));
  return { rows: [...rows], full: false };
}

/**
 * Max |out − reference| over the checked rows. q (B,T,N,H), k (B,S,K,H), v (B,S,K,H) and out
 * (B,T,N,H) are decoded float64 values; causal masking is top-left (query t sees keys s ≤ t), the
 * alignment attnlab, JAX and PyTorch share by default. Returns NaN if the output holds a NaN.
 */
export function maxErrorAgainstOracle(
  shape: OracleShape,
  q: Float64Array,
  k: Float64Array,
  v: Float64Array,
  out: Float64Array,
): { maxError: number; full: boolean } {
  const { B, T, S, N, K, H, causal, scale } = shape;
  const { rows, full } = checkedRows(shape);
  const group = N / K;
  const logits = new Float64Array(S);
  const acc = new Float64Array(H);
  let maxError = 0;
  for (let b = 0; b < B; b++) {
    for (let n = 0; n < N; n++) {
      const kvHead = Math.floor(n / group);
      for (const t of rows) {
        const qBase = ((b * T + t) * N + n) * H;
        const visible = causal ? Math.min(S, t + 1) : S;
        let max = Number.NEGATIVE_INFINITY;
        for (let s = 0; s < visible; s++) {
          const kBase = ((b * S + s) * K + kvHead) * H;
          let dot = 0;
          for (let h = 0; h < H; h++) dot += q[qBase + h] * k[kBase + h];
          logits[s] = dot * scale;
          if (logits[s] > max) max = logits[s];
        }
        acc.fill(0);
        let sum = 0;
        for (let s = 0; s < visible; s++) {
          const p = Math.exp(logits[s] - max);
          sum += p;
          const vBase = ((b * S + s) * K + kvHead) * H;
          for (let h = 0; h < H; h++) acc[h] += p * v[vBase + h];
        }
        for (let h = 0; h < H; h++) {
          const expected = visible === 0 ? 0 : acc[h] / sum;
          const diff = Math.abs(out[qBase + h] - expected);
          if (Number.isNaN(diff)) return { maxError: Number.NaN, full };
          if (diff > maxError) maxError = diff;
        }
      }
    }
  }
  return { maxError, full };
}
