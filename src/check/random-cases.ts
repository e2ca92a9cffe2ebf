/**
 * Seeded random configurations on top of the hand-picked cases: shapes, GQA ratios, causality in both
 * alignments, windows, padding lengths, bias and mask broadcasts, scales, drawn independently so that
 * combinations nobody wrote by hand get run. The same seed gives the same cases on every machine (the
 * suites print it and can draw others), and each case's name spells out
 * what was drawn, so a failure names its configuration.
 *
 * Head dims come from {32, 64, 128}, and a bias or a mask (never both) comes with H = 64: the
 * hand-picked cases compile those kernel variants anyway, so a random draw adds no compile time. Lengths stay under ~200 so that the float64
 * oracle in JS costs milliseconds.
 */
import { Random } from '../tensor/random.js';
import type { AttentionCase } from './cases.js';

/** The draw the suites run unless told another (the tests and `attnlab check --cases-seed`). */
export const RANDOM_CASES_SEED = 13;

const HEAD_DIMS = [32, 64, 128] as const;

/** `count` random cases from `seed`. */
export function randomCases(count: number, seed: number = RANDOM_CASES_SEED): AttentionCase[] {
  const rng = new Random(seed);
  const int = (lo: number, hi: number) => lo + (rng.nextUint32() % (hi - lo + 1)); // inclusive
  const chance = (p: number) => rng.nextFloat() < p;
  const pick = <T>(items: readonly T[]): T => items[rng.nextUint32() % items.length];
  return Array.from({ length: count }, (_, index) => {
    const B = int(1, 3);
    const K = pick([1, 2, 4]);
    const N = K * pick([1, 2, 4]);
    // A bias or a mask (never both), at H = 64, whose variants the hand-picked cases compile.
    const extra = pick(['none', 'none', 'none', 'bias', 'mask'] as const);
    const H = extra === 'none' ? pick(HEAD_DIMS) : 64;
    const Hv = extra === 'none' && chance(0.2) ? pick(HEAD_DIMS) : H;
    const T = chance(0.15) ? 1 : int(2, 160);
    const S = int(1, 200);
    const c: AttentionCase = { name: '', shape: { B, T, S, N, K, H, Hv }, options: {} };
    const options = c.options!;
    const parts = [
      `random ${index}: B=${B} T=${T} S=${S} N=${N} K=${K} H=${H}${Hv !== H ? ` Hv=${Hv}` : ''}`,
    ];
    if (chance(0.5)) {
      options.isCausal = true;
      parts.push('causal');
    }
    if (chance(0.25)) {
      options.localWindowSize = [int(0, 48), int(0, 48)];
      parts.push(`window [${options.localWindowSize.join(',')}]`);
    }
    if ((options.isCausal || options.localWindowSize) && chance(0.4)) {
      options.causalAlignment = 'bottom_right';
      parts.push('bottom-right');
    }
    if (chance(0.3)) {
      options.querySeqLengths = Array.from({ length: B }, () => int(1, T));
      options.keyValueSeqLengths = Array.from({ length: B }, () => int(1, S));
      parts.push(`lengths q [${options.querySeqLengths}] kv [${options.keyValueSeqLengths}]`);
    }
    if (extra === 'bias') {
      c.biasShape = pick<[number, number, number, number]>([
        [B, N, T, S],
        [1, N, T, S],
        [B, 1, T, S],
        [1, 1, T, S],
        [B, 1, 1, S],
      ]);
      parts.push(`bias (${c.biasShape})`);
    }
    if (extra === 'mask') {
      c.maskShape = pick<[number, number, number, number]>([
        // Not (…, 1, S): with one query row, buildInputs's empty row 0 would mask every row.
        [B, 1, T, S],
        [1, N, T, S],
        [1, 1, T, S],
      ]);
      parts.push(`mask (${c.maskShape})`);
    }
    if (chance(0.15)) {
      options.scale = Math.round((0.05 + 0.45 * rng.nextFloat()) * 1000) / 1000;
      parts.push(`scale ${options.scale}`);
    }
    c.name = parts.join(' ');
    return c;
  });
}
