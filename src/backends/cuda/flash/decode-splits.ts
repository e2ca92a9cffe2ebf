/**
 * How many slices of the key range the decode kernel splits each (batch, kv head, row group) into.
 *
 * A split-KV grid of `blocks · splits` blocks runs in waves of `slots` (multiprocessors × blocks
 * that fit on one by shared memory: 2 at D=128). The time of a launch is about
 *   waves · (tiles per split + FILL) + (splits > 1 ? COMBINE : 0)      (in 64-key tile times)
 * FILL: a block's pipeline fill and merge, COMBINE: the second launch and its reads. Both are
 * estimates (a fill is one DRAM latency, ~1–2 µs, about one tile time of a block at full bandwidth;
 * a launch ~3–5 µs), NOT yet measured: bench/decode/splits-sweep.ts measures every split count per
 * shape against the model's choice, and its first run (bench/results/2026-12-01-s5-decode) came
 * back empty. The count minimising the time is taken: B=8, S=128k, K=8 gets 4 splits (256 blocks,
 * one wave of 264) where the old "two blocks per SM" rule took 5 (320 blocks: a second wave of 56;
 * measured 1.38 TB/s there against 2.2 at B=64, bench/results/2026-12-01-decode).
 */

/** Pipeline fill + merge of one block, in tile times (an estimate: see the header). */
export const FILL_TILES = 1;
/** The combine launch, in tile times (an estimate: see the header). */
export const COMBINE_TILES = 2;
const MAX_SPLITS = 128;
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
  return waves * (Math.ceil(s.tiles / splits) + FILL_TILES) + (splits > 1 ? COMBINE_TILES : 0);
}

/**
 * The fewest splits whose modelled time is within TIE of the least: past a few waves the model's
 * differences are smaller than its error, and every extra split costs a combine read and a fill.
 */
export function chooseSplitCount(s: SplitShape): number {
  const limit = Math.min(MAX_SPLITS, s.tiles);
  const costs = Array.from({ length: limit }, (_, i) => splitCost(s, i + 1));
  const least = Math.min(...costs);
  return costs.findIndex((cost) => cost <= least * (1 + TIE)) + 1;
}

/**
 * Forced choices for measuring (bench/decode/splits-sweep.ts) and for tests: a split count, or the
 * loader ('bulk' is the only way to reach the bulk-copy loader, off by default: decode.ts says why).
 * Unset fields keep the normal choice.
 */
export interface DecodeTuning {
  splits?: number;
  loader?: 'bulk' | 'async';
}
export const decodeTuning: DecodeTuning = {};
