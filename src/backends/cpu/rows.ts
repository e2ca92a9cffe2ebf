/**
 * The scaled, masked logits of every query row, computed one way for every float64 CPU path: the
 * reference, the FP8 reference and the plain low-precision baseline of the accuracy rule, so the
 * visibility rules and the logit formula (scoreMod(scale · q·k + bias), −inf where a mask or maskMod drops
 * the pair) exist once. The two
 * float64 references also share their softmax and P·V (softmaxTimesValue); the baseline rounds its own.
 */
import type { AttentionProblem } from '../problem.js';
import { keyRange, pairTerms } from './visibility.js';

/** One query row; `logits[lo..hi)` hold its values. The object and array are reused between rows. */
export interface RowLogits {
  b: number;
  n: number;
  i: number;
  /** The key/value head this query head reads (n / (N / K)). */
  kh: number;
  lo: number;
  hi: number;
  /** −inf when the row sees no key; NaN when a visible logit is NaN (then the row is NaN). */
  max: number;
  readonly logits: Float64Array;
  /** With a score modifier: each key's score before it (the backward's chain rule starts there); else null. */
  readonly raw: Float64Array | null;
}

/**
 * Calls `visit` for every (b, n, i) row in order, with decoded float64 inputs `q` and `k`.
 * `round`, when given, rounds the dot product and then the logit (a same-precision baseline).
 */
export function forEachRow(
  p: AttentionProblem,
  q: Float64Array,
  k: Float64Array,
  visit: (row: RowLogits) => void,
  round?: (x: number) => number,
): void {
  const { B, T, S, N, K, H, scale } = p;
  const terms = pairTerms(p);
  const [ms, bs] = [terms.maskStrides, terms.biasStrides];
  // Modifiers (src/variants/) act after the bias and before the softmax: score first, then the mask.
  const scoreMod = p.modifiers?.scoreMod;
  const maskMod = p.modifiers?.maskMod;
  const raw = scoreMod ? new Float64Array(S) : null;
  const row: RowLogits = { b: 0, n: 0, i: 0, kh: 0, lo: 0, hi: 0, max: 0, logits: new Float64Array(S), raw };
  const logits = row.logits;
  for (let b = 0; b < B; b++) {
    for (let n = 0; n < N; n++) {
      const kh = Math.floor(n / (N / K));
      for (let i = 0; i < T; i++) {
        const { lo, hi } = keyRange(p, b, i);
        const qOff = ((b * T + i) * N + n) * H;
        const maskRow = b * ms[0] + n * ms[1] + i * ms[2];
        const biasRow = b * bs[0] + n * bs[1] + i * bs[2];
        let max = Number.NEGATIVE_INFINITY;
        for (let j = lo; j < hi; j++) {
          let s = Number.NEGATIVE_INFINITY;
          if (!terms.mask || terms.mask[maskRow + j * ms[3]]) {
            const kOff = ((b * S + j) * K + kh) * H;
            let dot = 0;
            for (let h = 0; h < H; h++) dot += q[qOff + h] * k[kOff + h];
            const bias = terms.bias ? terms.bias[biasRow + j * bs[3]] : 0;
            s = round ? round(round(dot) * scale + bias) : dot * scale + bias;
            if (scoreMod && raw) {
              raw[j] = s;
              s = round ? round(scoreMod(s, b, n, i, j)) : scoreMod(s, b, n, i, j);
            }
            if (maskMod && !maskMod(b, n, i, j)) s = Number.NEGATIVE_INFINITY;
          }
          logits[j] = s;
          max = Math.max(max, s); // Math.max propagates NaN: a NaN logit makes the row NaN
        }
        row.b = b;
        row.n = n;
        row.i = i;
        row.kh = kh;
        row.lo = lo;
        row.hi = hi;
        row.max = max;
        visit(row);
      }
    }
  }
}

/**
 * Softmax of a row that sees some key (row.max > −inf) in float64, and its weights times V added into
 * the row's slot of `out` (B,T,N,Hv); `v` is (B,S,K,Hv). Leaves the unnormalised weights exp(s − max)
 * in row.logits and returns their sum (so the row's largest weight is 1 / sum).
 *
 * IEEE arithmetic over the visible keys (docs/guide/attention.md, "Rows that see nothing, NaN and Inf"): a NaN or +inf
 * max makes every weight, the sum and so the whole row NaN; a visible key adds w·v even when w
 * underflows to 0 (0 · NaN is NaN), while a key whose logit is −inf is masked and adds nothing, whatever
 * V holds there. Its weight is stored as −0, which exp() never returns, so callers can tell it apart.
 */
/** The weight of a masked key (logit −inf) in softmaxTimesValue: −0, never a result of exp(). */
const MASKED_WEIGHT = -0;

export function softmaxTimesValue(
  p: AttentionProblem,
  row: RowLogits,
  v: Float64Array,
  out: Float64Array,
): number {
  const { T, S, N, K, Hv } = p;
  const { b, n, i, kh, lo, hi, max, logits } = row;
  let sum = 0;
  for (let j = lo; j < hi; j++) {
    sum += logits[j] = logits[j] === Number.NEGATIVE_INFINITY ? MASKED_WEIGHT : Math.exp(logits[j] - max);
  }
  const oOff = ((b * T + i) * N + n) * Hv;
  for (let j = lo; j < hi; j++) {
    if (Object.is(logits[j], MASKED_WEIGHT)) continue;
    const w = logits[j] / sum;
    const vOff = ((b * S + j) * K + kh) * Hv;
    for (let h = 0; h < Hv; h++) out[oOff + h] += w * v[vOff + h];
  }
  return sum;
}
