/**
 * The ring schedule of context-parallel attention, as a pure function: which chunks of the sequence
 * meet at which step on which rank, which of those pairs are fully visible, cut by the diagonal or
 * window ("masked"), or skipped, and which attention calls cover them.
 *
 * Layout (the load-balanced split of TransformerEngine's and Megatron's context parallelism): the
 * query sequence is cut into 2P chunks of T/(2P) rows, the key/value sequence into 2P chunks of
 * S/(2P); rank r holds chunks r and 2P−1−r, in that order, as its shard of T/P (S/P) rows. Under a
 * causal mask an early chunk sees few keys and a late one many, so pairing chunk r with 2P−1−r gives
 * every rank the same work: at P = 4 and T = S, each rank computes 2 diagonal and 2(P−1) full
 * chunk-pair blocks, where a contiguous split would give rank 3 seven blocks and rank 0 one.
 *
 * Ring: at step s (0 ≤ s < P) rank r holds the key/value shard of rank (r − s) mod P; between steps
 * every rank sends what it holds to rank r + 1 and receives from rank r − 1.
 *
 * Visibility is the one of `attention` (backends/cpu/visibility.ts) in global positions: query t
 * sees key s when t + offset − left ≤ s ≤ t + offset + right, with offset 0 for top_left and
 * S_b − T_b for bottom_right, right clipped to 0 by isCausal, left/right Infinity without a window.
 * Padding is not part of the schedule (it only masks; the runner passes each call its local lengths).
 */
import type { RowRange } from '../backends/ring-backend.js';

export type { RowRange };

/** What one ring schedule depends on. */
export interface RingScheduleInput {
  /** Ranks. */
  readonly P: number;
  /** Global query and key lengths; both divisible by 2P. */
  readonly T: number;
  readonly S: number;
  readonly causal: boolean;
  /** The diagonal's offset in global positions: 0 (top_left) or S_b − T_b (bottom_right). */
  readonly offset: number;
  /** Inclusive window bounds, or null. */
  readonly window: { readonly left: number; readonly right: number } | null;
}

export type PairKind = 'full' | 'masked' | 'skip';

/** One (query chunk, key chunk) pair of a step: global chunk indices and how much of it is visible. */
export interface ChunkPair {
  readonly queryChunk: number;
  readonly keyChunk: number;
  readonly kind: PairKind;
}

/**
 * One attention call of a step, in the shard's local rows, with the visibility expressed as
 * `attention`'s options in top_left alignment: `causal` (key j ≤ query i) and an optional window
 * [i − left, i + right] over the call's own rows.
 */
export interface RingCall {
  readonly queryRows: RowRange;
  readonly keyRows: RowRange;
  readonly causal: boolean;
  readonly window: { readonly left: number; readonly right: number } | null;
  /** The chunk pairs this call covers (its skipped parts included). */
  readonly pairs: readonly ChunkPair[];
}

export interface RingStep {
  readonly step: number;
  readonly rank: number;
  /** Whose key/value shard the rank holds at this step: (rank − step) mod P. */
  readonly source: number;
  /** The four chunk pairs, query chunk major. */
  readonly pairs: readonly ChunkPair[];
  readonly calls: readonly RingCall[];
}

/** The two chunks rank r holds, in shard order: r, then 2P − 1 − r. */
export function chunksOf(rank: number, P: number): readonly [number, number] {
  return [rank, 2 * P - 1 - rank];
}

/** Allowed j − i of a block, before clipping to its rectangle (±Infinity for unbounded). */
interface Band {
  readonly lo: number;
  readonly hi: number;
}

/** The band restricted to a rows × cols rectangle: the smallest equivalent one, or null when empty. */
function clip(band: Band, rows: number, cols: number): Band | null {
  const lo = Math.max(band.lo, -(rows - 1));
  const hi = Math.min(band.hi, cols - 1);
  return lo > hi ? null : { lo, hi };
}

function sameOn(a: Band, b: Band, rows: number, cols: number): boolean {
  const x = clip(a, rows, cols);
  const y = clip(b, rows, cols);
  return x === null || y === null ? x === y : x.lo === y.lo && x.hi === y.hi;
}

function kindOf(band: Band, rows: number, cols: number): PairKind {
  const c = clip(band, rows, cols);
  if (c === null) return 'skip';
  return c.lo === -(rows - 1) && c.hi === cols - 1 ? 'full' : 'masked';
}

/** A candidate call: a rectangle of the 2×2 chunk grid and its band in the rectangle's own rows. */
interface Block {
  readonly us: readonly number[];
  readonly vs: readonly number[];
  readonly band: Band;
}

/**
 * The schedule of every rank at every step: steps[s][r]. Throws RangeError on sizes the layout
 * cannot split (the public entry point turns those into InvalidArgumentError first).
 */
export function ringSchedule(input: RingScheduleInput): RingStep[][] {
  const { P, T, S } = input;
  if (!Number.isInteger(P) || P < 1) throw new RangeError(`P: expected a positive integer, got ${P}`);
  if (T % (2 * P) !== 0 || S % (2 * P) !== 0 || T === 0 || S === 0)
    throw new RangeError(`T=${T} and S=${S} must be positive multiples of 2P=${2 * P}`);
  const steps: RingStep[][] = [];
  for (let step = 0; step < P; step++) {
    const row: RingStep[] = [];
    for (let rank = 0; rank < P; rank++) row.push(stepOf(input, step, rank));
    steps.push(row);
  }
  return steps;
}

/** The global band: s − t ∈ [offset − left, offset + right], right ≤ 0 when causal. */
function globalBand(input: RingScheduleInput): Band {
  const left = input.window ? input.window.left : Infinity;
  let right = input.window ? input.window.right : Infinity;
  if (input.causal) right = Math.min(right, 0);
  return { lo: input.offset - left, hi: input.offset + right };
}

function stepOf(input: RingScheduleInput, step: number, rank: number): RingStep {
  const { P } = input;
  const tc = input.T / (2 * P);
  const sc = input.S / (2 * P);
  const source = (rank - step + P) % P;
  const qChunks = chunksOf(rank, P);
  const kChunks = chunksOf(source, P);
  const g = globalBand(input);
  // pairBand[u][v]: j − i within the (tc × sc) block of query chunk u, key chunk v.
  const pairBand = [0, 1].map((u) =>
    [0, 1].map((v) => {
      const shift = qChunks[u] * tc - kChunks[v] * sc;
      return { lo: g.lo + shift, hi: g.hi + shift };
    }),
  );
  const pairs: ChunkPair[] = [];
  for (const u of [0, 1])
    for (const v of [0, 1])
      pairs.push({ queryChunk: qChunks[u], keyChunk: kChunks[v], kind: kindOf(pairBand[u][v], tc, sc) });
  const pairAt = (u: number, v: number) => pairs[2 * u + v];

  // A rectangle of the 2×2 grid is one call when one band, in the rectangle's rows, gives every pair in
  // it exactly its own visible set. Candidates: each pair's band moved into the rectangle, and "all".
  const fuse = (us: readonly number[], vs: readonly number[]): Block | null => {
    // Pair (u, v) sits at rows us.indexOf(u)·tc, columns vs.indexOf(v)·sc of the rectangle, so a
    // pair's j − i is the rectangle's J − I minus this shift.
    const shift = (u: number, v: number) => vs.indexOf(v) * sc - us.indexOf(u) * tc;
    const candidates: Band[] = [{ lo: -Infinity, hi: Infinity }];
    for (const u of us)
      for (const v of vs)
        candidates.push({ lo: pairBand[u][v].lo + shift(u, v), hi: pairBand[u][v].hi + shift(u, v) });
    for (const band of candidates) {
      const fits = us.every((u) =>
        vs.every((v) =>
          sameOn({ lo: band.lo - shift(u, v), hi: band.hi - shift(u, v) }, pairBand[u][v], tc, sc),
        ),
      );
      if (fits) return { us, vs, band };
    }
    return null;
  };
  const live = (us: readonly number[], vs: readonly number[]) =>
    us.some((u) => vs.some((v) => pairAt(u, v).kind !== 'skip'));
  const cover = (groups: ReadonlyArray<[readonly number[], readonly number[]]>): Block[] => {
    const blocks: Block[] = [];
    for (const [us, vs] of groups) {
      if (!live(us, vs)) continue;
      const whole = fuse(us, vs);
      if (whole) {
        blocks.push(whole);
        continue;
      }
      for (const u of us) for (const v of vs) if (pairAt(u, v).kind !== 'skip') blocks.push(fuse([u], [v])!);
    }
    return blocks;
  };
  const all = fuse([0, 1], [0, 1]);
  let blocks: Block[];
  if (!live([0, 1], [0, 1])) blocks = [];
  else if (all) blocks = [all];
  else {
    const byRows = cover([
      [[0], [0, 1]],
      [[1], [0, 1]],
    ]);
    const byCols = cover([
      [[0, 1], [0]],
      [[0, 1], [1]],
    ]);
    blocks = byCols.length < byRows.length ? byCols : byRows;
  }
  const calls = blocks.map((b) => toCall(b, tc, sc, pairs));
  return { step, rank, source, pairs, calls: calls.filter((c): c is RingCall => c !== null) };
}

/**
 * A block as an attention call. A band that does not contain the main diagonal (j − i = 0) cannot be
 * written as `attention`'s non-negative window, so the rows it never reaches are cut off first: keys
 * before lo when lo > 0, queries before −hi when hi < 0 (those rows see nothing in this block).
 */
function toCall(block: Block, tc: number, sc: number, pairs: readonly ChunkPair[]): RingCall | null {
  const rows = block.us.length * tc;
  const cols = block.vs.length * sc;
  const clipped = clip(block.band, rows, cols);
  if (clipped === null) return null;
  let qStart = block.us[0] * tc;
  let kStart = block.vs[0] * sc;
  let tq = rows;
  let sk = cols;
  let { lo, hi } = clipped;
  if (lo > 0) {
    kStart += lo;
    sk -= lo;
    hi -= lo;
    lo = 0;
  } else if (hi < 0) {
    qStart -= hi;
    tq += hi;
    lo -= hi;
    hi = 0;
  }
  const left = lo === -(tq - 1) ? Infinity : -lo;
  const right = hi === sk - 1 ? Infinity : hi;
  const causal = right === 0;
  const window = left === Infinity && (right === Infinity || causal) ? null : { left, right };
  const covered = pairs.filter((_, i) => block.us.includes(i >> 1) && block.vs.includes(i & 1));
  return {
    queryRows: { start: qStart, length: tq },
    keyRows: { start: kStart, length: sk },
    causal,
    window,
    pairs: covered,
  };
}
