import { InvalidArgumentError } from '../../../../errors.js';

/**
 * How many slices of the key range the decode kernel splits each (batch, kv head, row group) into.
 *
 * A split-KV grid of `blocks · splits` blocks runs in waves of `slots` (multiprocessors × blocks
 * that fit on one by shared memory: 2 at D=128 with one or two row tiles). The time of a launch
 * is about (in tile times: one block's time for one 64-key tile, ~2.3 µs at D=128 on the H200)
 *   waves · (tiles per split + FILL) + (splits > 1 ? COMBINE + PER_SPLIT · splits : 0)
 * FILL: a block's pipeline fill and merge; COMBINE: the second launch; PER_SPLIT: what each split
 * adds (its partial rows written and read back by the combine). Fitted to H200 sweeps of every
 * split count (benchmarks/results/h200/decode/2026-12-01-row-tile-split-counts, 10 shapes × dense and paged16, bulk loader).
 * With no per-split term the model took 32 splits at B=1 S=2k where 8 was best (29.8 vs 22.3 µs,
 * first sweep); with the combine reading the splits in parallel (second sweep) the best moved to
 * 16 at S=2k (17.5 µs) and 32 at S=8k (23.9 µs), and PER_SPLIT = 0.125 picks those and, at every
 * other shape of the sweep, the best or one within 5%. Past a few waves the differences are
 * smaller than the model's error, and the fewest splits within TIE of the least are taken, among
 * the counts the sweep measured (SPLIT_CANDIDATES). The heads kernel (decode-heads.ts) uses the same
 * model over its own tiles and one block per SM: in its sweep (benchmarks/results/h200/decode/2026-12-01-heads-kernel-cudnn-paged) it
 * picked the best count at every shape with B ≥ 8 (16 at B=8 S=128k, 8 at B=16 S=8k, 2 at B=64 S=16k).
 */

/** Pipeline fill + merge of one block, in tile times. */
export const FILL_TILES = 1;
/** The combine launch, in tile times. */
export const COMBINE_TILES = 2;
/** Each split's share of the combine (tile times), fitted to the sweep: see the header. */
export const PER_SPLIT_TILES = 0.125;
/** The split counts the sweep measured (and 96, 128 past it): the model chooses among these only. */
const SPLIT_CANDIDATES = [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128];
/** The most splits the combine kernel merges (DEC_MAX_SPLITS in flash_decode.cu). */
export const MAX_SPLITS = 128;
const TIE = 0.02;

export interface SplitShape {
  /** Blocks without splitting: B · K · row groups. */
  readonly blocks: number;
  /** 64-key tiles of the longest key range. */
  readonly tiles: number;
  /** Blocks running at once on the whole GPU. */
  readonly slots: number;
}

/** Modelled launch time (tile times) of `splits`, as in the header. */
export function splitCost(s: SplitShape, splits: number): number {
  const waves = Math.ceil((s.blocks * splits) / s.slots);
  const combine = splits > 1 ? COMBINE_TILES + PER_SPLIT_TILES * splits : 0;
  return waves * (Math.ceil(s.tiles / splits) + FILL_TILES) + combine;
}

/**
 * The fewest splits whose modelled time is within TIE of the least: past a few waves the model's
 * differences are smaller than its error, and every extra split costs a combine read and a fill.
 */
export function chooseSplitCount(s: SplitShape): number {
  // Two passes over the candidates, no arrays: this runs two or three times a decode call.
  let least = Number.POSITIVE_INFINITY;
  for (const n of SPLIT_CANDIDATES) if (n <= s.tiles) least = Math.min(least, splitCost(s, n));
  for (const n of SPLIT_CANDIDATES) if (n <= s.tiles && splitCost(s, n) <= least * (1 + TIE)) return n;
  return 1;
}

/**
 * Forced choices for measuring (benchmarks/harnesses/decode-split-counts.ts) and for tests: a split count, the
 * kernel, or the row-tile kernel's loader (bulk copies or 16-byte cp.async; forcing a loader forces
 * the row-tile kernel unless `kernel` says heads). Unset fields keep the normal choice.
 */
export interface DecodeTuning {
  splits?: number;
  loader?: 'bulk' | 'async';
  /**
   * The row-tile kernel (flash_decode.cu), the heads kernel (flash_decode_heads.cu, decode-heads.ts) or
   * its TMA form (flash_decode_ws.cu, decode-tma.ts); a kernel that cannot take the problem leaves the
   * normal choice.
   */
  kernel?: 'rows' | 'heads' | 'tma';
  /** The TMA kernel's form (decode-tma.ts, tmaRowGroups): one block a key range, or two (row groups). */
  rowGroups?: 1 | 2;
  /**
   * The one-block form's row tiles (decode-tma.ts, oneBlockRowTiles): 2 where a kv head's rows fit one (at most
   * 16), for measuring the tile of padding the rule leaves out; 1 (the rule there) cannot hold more rows.
   */
  rowTiles?: 1 | 2;
  /**
   * Where the TMA kernel's splits are merged (decode-tma.ts, tmaCombinesInSplit): by the split kernel's last
   * block of each key range ('fused', at any split count) or by the combine kernel ('kernel', the default).
   */
  combine?: 'fused' | 'kernel';
  /**
   * The TMA kernel's copies (decode-tma.ts, DecodeTmaVariant.boxGroup): 0, a copy a 128-byte half of a page's
   * (or a dense tile's) rows, or 8, 16, 32 rows with both halves a copy; the rule picks by layout and form.
   */
  boxGroup?: 0 | 8 | 16 | 32;
  /**
   * Row groups as two-CTA clusters sharing each tile by TMA multicast (decode-tma.ts, DecodeTmaVariant.multicast)
   * or as two independent blocks each reading it (decode-tma.ts, tmaMulticast); applies where the TMA kernel
   * runs in row groups.
   */
  multicast?: boolean;
}
export const decodeTuning: DecodeTuning = {};

/** The values each DecodeTuning field takes ('splits': an integer 1 … MAX_SPLITS). */
const TUNING_VALUES: { readonly [F in keyof Required<DecodeTuning>]: readonly unknown[] | 'splits' } = {
  splits: 'splits',
  loader: ['bulk', 'async'],
  kernel: ['rows', 'heads', 'tma'],
  rowGroups: [1, 2],
  rowTiles: [1, 2],
  combine: ['fused', 'kernel'],
  boxGroup: [0, 8, 16, 32],
  multicast: [true, false],
};

/**
 * `fields` (a bench's --tuning JSON, parsed) checked against DecodeTuning and set into decodeTuning: an unknown
 * key or a value a field does not take is an InvalidArgumentError naming `argument` and the key (a removed
 * field, as the removed `prefetch`, would otherwise do nothing and say nothing).
 */
export function applyDecodeTuning(fields: unknown, argument = 'decodeTuning'): void {
  if (typeof fields !== 'object' || fields === null || Array.isArray(fields))
    throw new InvalidArgumentError(argument, 'an object of DecodeTuning fields', JSON.stringify(fields));
  const known = Object.keys(TUNING_VALUES).join(', ');
  for (const [key, value] of Object.entries(fields)) {
    if (!Object.hasOwn(TUNING_VALUES, key))
      throw new InvalidArgumentError(`${argument}.${key}`, `one of the fields ${known}`, `an unknown key`);
    const values = TUNING_VALUES[key as keyof DecodeTuning];
    const ok =
      values === 'splits'
        ? Number.isInteger(value) && (value as number) >= 1 && (value as number) <= MAX_SPLITS
        : values.includes(value);
    if (!ok) {
      const expected =
        values === 'splits'
          ? `an integer 1 … ${MAX_SPLITS}`
          : values.map((v) => JSON.stringify(v)).join(' or ');
      throw new InvalidArgumentError(`${argument}.${key}`, expected, JSON.stringify(value));
    }
  }
  Object.assign(decodeTuning, fields);
}
