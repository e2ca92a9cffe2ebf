/**
 * The comparison for NaN cases (nan-cases.ts): exact on the non-finite pattern, tolerant on the rest.
 * A tolerance cannot judge NaN — |NaN − x| is NaN, and "max error" either hides or fails on it — so
 * the set of NaN output elements must equal the case's prediction exactly, as must the +inf elements,
 * the empty rows (zeros, log-sum-exp −inf) and the NaN log-sum-exps; every other element must match
 * the clean problem's float64 reference within `tolerance`.
 */
import type { NanCase } from './nan-cases.js';

export interface NanComparison {
  readonly ok: boolean;
  /** The first mismatches, one per line, and how many there were. */
  readonly message: string;
}

/** Absolute output tolerance per precision for the finite part (|O| ≤ max |V| ≈ 4 on normal data). */
export const NAN_CASE_TOLERANCE = {
  float64: 1e-12,
  float32: 1e-4,
  tf32: 1e-2,
  float16: 1e-2,
  bfloat16: 4e-2,
} as const;

/**
 * `output` (B,T,N,H) and `lse` (B,T,N) of the poisoned problem against the predictions of `c` and the
 * clean problem's reference `cleanOutput` / `cleanLse`.
 */
export function compareNanCase(
  c: NanCase,
  output: Float64Array,
  lse: Float64Array | undefined,
  cleanOutput: Float64Array,
  cleanLse: Float64Array,
  tolerance: number,
): NanComparison {
  const { B, T, N, H } = c.shape;
  const problems: string[] = [];
  let count = 0;
  const report = (what: string) => {
    count++;
    if (problems.length < 6) problems.push(what);
  };
  for (let b = 0; b < B; b++)
    for (let i = 0; i < T; i++)
      for (let n = 0; n < N; n++) {
        const row = (b * T + i) * N + n;
        const nanRow = c.nanRow?.(b, i, n) ?? false;
        const empty = c.emptyRow?.(b, i, n) ?? false;
        for (let h = 0; h < H; h++) {
          const a = output[row * H + h];
          const where = `out[${b},${i},${n},${h}]`;
          if (nanRow || (c.nanElement?.(b, i, n, h) ?? false)) {
            if (!Number.isNaN(a)) report(`${where} = ${a}, expected NaN`);
          } else if (c.infElement?.(b, i, n, h)) {
            if (a !== Number.POSITIVE_INFINITY) report(`${where} = ${a}, expected +inf`);
          } else if (empty) {
            if (a !== 0) report(`${where} = ${a}, expected 0 (the row sees no key)`);
          } else if (!(Math.abs(a - cleanOutput[row * H + h]) <= tolerance)) {
            report(`${where} = ${a}, expected ${cleanOutput[row * H + h]} (±${tolerance})`);
          }
        }
        if (!lse) continue;
        const l = lse[row];
        const where = `lse[${b},${i},${n}]`;
        if (nanRow) {
          if (!Number.isNaN(l)) report(`${where} = ${l}, expected NaN`);
        } else if (empty) {
          if (l !== Number.NEGATIVE_INFINITY) report(`${where} = ${l}, expected −inf`);
        } else if (cleanLse[row] === Number.NEGATIVE_INFINITY) {
          if (l !== Number.NEGATIVE_INFINITY) report(`${where} = ${l}, expected −inf`);
        } else if (!(Math.abs(l - cleanLse[row]) <= 1e-2 * Math.max(1, Math.abs(cleanLse[row])))) {
          report(`${where} = ${l}, expected ${cleanLse[row]}`);
        }
      }
  const message = count === 0 ? 'ok' : `${count} mismatches:\n  ${problems.join('\n  ')}`;
  return { ok: count === 0, message };
}
