/**
 * The two non-dense layouts of attention inputs, validated here and carried in the problem:
 *
 * - **Paged KV cache** (vLLM, FlashAttention's `flash_attn_with_kvcache`, cuDNN's paged attention):
 *   key and value are pools (numBlocks, blockSize, K, H) / (numBlocks, blockSize, K, Hv), and
 *   `blockTable` (B, maxBlocksPerSeq) maps logical block m of sequence b to pool block
 *   blockTable[b][m]. Sequence b holds keyValueSeqLengths[b] tokens, so its first
 *   ceil(len / blockSize) table entries must name pool blocks; later entries are ignored (serving
 *   systems pad them with 0 or −1). The logical key length is S = maxBlocksPerSeq · blockSize.
 * - **Packed (varlen) sequences** (FlashAttention's cu_seqlens, TransformerEngine's THD format):
 *   query (totalT, N, H) and key/value (totalS, K, H) hold the batch's sequences one after another;
 *   `querySeqOffsets` / `keyValueSeqOffsets` hold B+1 cumulative starts (0 first, the total last).
 *   T and S are the longest sequences, so bias and mask broadcast to (B, N, T, S) as for padded
 *   inputs, and the output is packed like the query: (totalT, N, Hv), log-sum-exp (totalT, N).
 *
 * A paged cache can be combined with a packed query (several new tokens per sequence); a packed key
 * and value cannot be paged at the same time.
 */

import { describeValue } from '../arguments.js';
import type { PackedSeqs, PagedKv } from '../backends/problem.js';
import { InvalidArgumentError } from '../errors.js';
import { sameInts } from '../tensor/same-ints.js';
import { checkTensor, Tensor } from '../tensor/tensor.js';

export const LAYOUT_OPTIONS = ['blockTable', 'querySeqOffsets', 'keyValueSeqOffsets'] as const;

const describe = (value: unknown): string => {
  if (value === null) return 'null';
  if (Array.isArray(value)) return `an array of ${value.length}`;
  if (value instanceof Tensor) return value.toString();
  // describeValue for the rest: a missing row of a table with holes read "undefined undefined".
  return describeValue(value);
};

/**
 * Lengths and offsets may come as an int32 Tensor of rank 1 (FlashAttention's cu_seqlens and seqused_k are
 * tensors), on the host or the GPU: its values, copied to the host for the checks here. Anything else passes
 * through for the caller's own check.
 */
export function int32ListOf(argument: string, value: unknown): unknown {
  if (!(value instanceof Tensor)) return value;
  checkTensor(argument, value);
  if (value.dtype !== 'int32') throw new InvalidArgumentError(`${argument}.dtype`, 'int32', value.dtype);
  if (value.rank !== 1)
    throw new InvalidArgumentError(argument, 'an int32 Tensor of rank 1', `[${value.shape.join(', ')}]`);
  return value.toHost().data as Int32Array;
}

/** B lengths, each an integer in [0, max] (`letter` names max in the message), or null where none were given. */
export function checkLengths(
  argument: string,
  given: ArrayLike<number> | Tensor | undefined,
  B: number,
  max: number,
  letter: string,
) {
  if (given === undefined) return null;
  const value = int32ListOf(argument, given) as ArrayLike<number>;
  if (value === null || typeof value !== 'object' || typeof value.length !== 'number') {
    throw new InvalidArgumentError(argument, `${B} integers (one per batch, B=${B})`, describeValue(value));
  }
  if (value.length !== B)
    throw new InvalidArgumentError(argument, `${B} values (B=${B})`, `${value.length} values`);
  const lengths = new Int32Array(B);
  for (let b = 0; b < B; b++) {
    const v = value[b];
    if (!Number.isInteger(v) || v < 0 || v > max) {
      throw new InvalidArgumentError(
        `${argument}[${b}]`,
        `an integer in [0, ${letter}=${max}]`,
        describeValue(v),
      );
    }
    lengths[b] = v;
  }
  return lengths;
}

/** B+1 non-decreasing integers from 0 to `total`. */
export function checkOffsets(argument: string, value: unknown, total: number, letter: string): Int32Array {
  const values = integerList(argument, value, `B+1 cumulative starts ending at ${letter}=${total}`);
  if (values.length < 2) {
    throw new InvalidArgumentError(argument, 'at least 2 values (B+1 starts, B ≥ 1)', `${values.length}`);
  }
  if (values[0] !== 0) throw new InvalidArgumentError(`${argument}[0]`, '0', String(values[0]));
  for (let b = 1; b < values.length; b++) {
    if (values[b] < values[b - 1]) {
      throw new InvalidArgumentError(
        `${argument}[${b}]`,
        `a value ≥ ${argument}[${b - 1}]=${values[b - 1]} (offsets never decrease)`,
        String(values[b]),
      );
    }
  }
  const last = values[values.length - 1];
  if (last !== total) {
    throw new InvalidArgumentError(
      `${argument}[${values.length - 1}]`,
      `the packed total ${letter}=${total} (the tensor's first dimension)`,
      String(last),
    );
  }
  return Int32Array.from(values);
}

/** Sequence lengths from B+1 offsets. */
export function lengthsFromOffsets(offsets: Int32Array): Int32Array {
  const lengths = new Int32Array(offsets.length - 1);
  for (let b = 0; b < lengths.length; b++) lengths[b] = offsets[b + 1] - offsets[b];
  return lengths;
}

export function maxLength(lengths: Int32Array): number {
  let max = 0;
  for (const l of lengths) max = Math.max(max, l);
  return max;
}

/**
 * The last block table that passed checkBlockTable: its entries, pool and each row's checked blocks, and the
 * tensor it came from where that tensor is one of `unchangingTables`.
 */
let lastChecked: {
  table: Int32Array;
  numBlocks: number;
  M: number;
  used: Int32Array;
  source: Tensor | null;
} | null = null;

/**
 * Block-table tensors whose entries never change after they are made: KVCache's kept tables (never handed to
 * a caller). The same one again is known checked without reading or comparing its B·M entries.
 */
const unchangingTables = new WeakSet<Tensor>();

/** Marks `table` as never changed after this call (its maker's promise). */
export function markUnchangingTable(table: Tensor): void {
  unchangingTables.add(table);
}

/**
 * The block table as (B, M) host integers, its entries in use checked against the pool, and the B lengths checked
 * against the table's capacity (M·blockSize tokens).
 */
export function checkBlockTable(
  value: unknown,
  B: number,
  pool: { numBlocks: number; blockSize: number },
  lengthsGiven: ArrayLike<number> | Tensor | undefined,
): { paged: PagedKv; lengths: Int32Array } {
  let table: Int32Array;
  let borrowed = false;
  let rows: number;
  let M: number;
  if (value instanceof Tensor) {
    checkTensor('blockTable', value);
    if (value.dtype !== 'int32') throw new InvalidArgumentError('blockTable.dtype', 'int32', value.dtype);
    if (value.rank !== 2) {
      throw new InvalidArgumentError(
        'blockTable',
        'rank 2 (B, maxBlocksPerSeq)',
        `[${value.shape.join(', ')}]`,
      );
    }
    [rows, M] = value.shape;
    table =
      lastChecked !== null && lastChecked.source === value
        ? lastChecked.table // an unchanging table checked before: the same entries
        : (value.toHost().data as Int32Array); // copied below unless a checked table holds the same entries
    borrowed = true;
  } else if (Array.isArray(value)) {
    rows = value.length;
    // Rows may be arrays, typed arrays or int32 tensors (integerList takes each): the width is row 0's as
    // read, not only when row 0 is a plain array (an Int32Array row 0 made every row "expected -1 entries").
    const list = Array.from(value, (row, b) =>
      integerList(`blockTable[${b}]`, row, 'block indices (one row per sequence)'),
    );
    M = rows > 0 ? list[0].length : 0;
    table = new Int32Array(rows * M);
    list.forEach((row, b) => {
      if (row.length !== M) {
        throw new InvalidArgumentError(`blockTable[${b}]`, `${M} entries as row 0`, `${row.length}`);
      }
      table.set(row, b * M);
    });
  } else {
    throw new InvalidArgumentError(
      'blockTable',
      'an int32 Tensor (B, maxBlocksPerSeq) or an array of B arrays of block indices',
      describe(value),
    );
  }
  if (rows !== B) throw new InvalidArgumentError('blockTable', `B=${B} rows (the query's batch)`, `${rows}`);
  if (M < 1) throw new InvalidArgumentError('blockTable', 'at least one block per sequence', `${M}`);
  if (lengthsGiven === undefined) {
    throw new InvalidArgumentError(
      'keyValueSeqLengths',
      `B=${B} cached lengths (required with a blockTable)`,
      'undefined',
    );
  }
  const { numBlocks, blockSize } = pool;
  // The lengths are checked here, where the table's capacity (its width in tokens) is known.
  const lengths = checkLengths(
    'keyValueSeqLengths',
    lengthsGiven,
    B,
    M * blockSize,
    'maxBlocksPerSeq·blockSize',
  )!;
  // The entries a previous call already checked need no second look: a decode loop passes the same
  // table on every step while its lengths grow inside the blocks already checked (a new block every
  // blockSize steps). 65,600 entries (B=64, S=16k, block 16) take ~85 µs to check on the build
  // machine and 262 µs on the H200 machine's CPU, longer than that step's ~190 µs kernel; the byte
  // compare that finds the table checked is ~3 µs.
  const known =
    lastChecked !== null &&
    lastChecked.numBlocks === numBlocks &&
    lastChecked.M === M &&
    (lastChecked.table === table || sameInts(lastChecked.table, table))
      ? lastChecked
      : null;
  const used = new Int32Array(B);
  for (let b = 0; b < B; b++) {
    used[b] = Math.ceil(lengths[b] / blockSize);
    // One unsigned compare per entry (a negative block reads as ≥ 2^31), from the first one not yet
    // checked for this row.
    for (let m = known ? Math.min(known.used[b], used[b]) : 0, at = b * M + m; m < used[b]; m++, at++) {
      const block = table[at];
      if (block >>> 0 >= numBlocks) {
        throw new InvalidArgumentError(
          `blockTable[${b}][${m}]`,
          `a pool block in [0, numBlocks=${numBlocks}) (sequence ${b} holds ${lengths[b]} tokens: ${used[b]} blocks)`,
          String(block),
        );
      }
    }
  }
  const source = value instanceof Tensor && unchangingTables.has(value) ? value : null;
  const checked = known ?? { table: borrowed ? table.slice() : table, numBlocks, M, used, source };
  checked.source = source;
  if (known) for (let b = 0; b < B; b++) known.used[b] = Math.max(known.used[b], used[b]);
  lastChecked = checked;
  table = checked.table; // the same entries, in an array the caller's tensor does not own
  return { paged: { blockTable: table, maxBlocksPerSeq: M, blockSize, numBlocks }, lengths };
}

function integerList(argument: string, given: unknown, expected: string): number[] {
  const value = int32ListOf(argument, given);
  if (
    value === null ||
    typeof value !== 'object' ||
    typeof (value as ArrayLike<number>).length !== 'number'
  ) {
    throw new InvalidArgumentError(argument, expected, describe(value));
  }
  const list = Array.from(value as ArrayLike<unknown>);
  list.forEach((v, i) => {
    if (typeof v !== 'number' || !Number.isInteger(v) || Math.abs(v) > 2 ** 31 - 1) {
      throw new InvalidArgumentError(`${argument}[${i}]`, 'a 32-bit integer', describe(v));
    }
  });
  return list as number[];
}

const shapeText = (t: Tensor): string => `[${t.shape.join(', ')}]`;
type Sizes4 = readonly [number, number, number, number];

/** How the inputs are laid out: the (B,T,N,H)-style sizes every later check uses, and the layout. */
export interface Layout {
  readonly q: { readonly tensor: Tensor; readonly batched: boolean };
  readonly k: { readonly tensor: Tensor };
  readonly v: { readonly tensor: Tensor };
  /** Logical sizes: query (B,T,N,H), key (B,S,K,H), value (B,S,K,Hv), whatever the storage. */
  readonly sizes: { readonly query: Sizes4; readonly key: Sizes4; readonly value: Sizes4 };
  /** False for dense (T,N,H) inputs: the output drops its batch dimension again. */
  readonly batched: boolean;
  readonly paged: PagedKv | null;
  readonly packed: PackedSeqs | null;
  /** Lengths the layout defines (packed offsets); null where the options give them. */
  readonly querySeqLengths: Int32Array | null;
  readonly keyValueSeqLengths: Int32Array | null;
}

/** (T,N,H) → (1,T,N,H); (B,T,N,H) as it is. */
function toBatched(argument: string, tensor: Tensor, letters: string): { tensor: Tensor; batched: boolean } {
  if (tensor.rank === 4) return { tensor, batched: true };
  if (tensor.rank === 3) return { tensor: tensor.reshape([1, ...tensor.shape]), batched: false };
  throw new InvalidArgumentError(
    argument,
    `rank 4 (${letters}) or rank 3 (${letters.slice(2)})`,
    `rank ${tensor.rank} ${shapeText(tensor)}`,
  );
}

function requireRank(argument: string, tensor: Tensor, rank: number, letters: string, why: string): void {
  if (tensor.rank !== rank) {
    throw new InvalidArgumentError(
      argument,
      `rank ${rank} ${letters} (${why})`,
      `rank ${tensor.rank} ${shapeText(tensor)}`,
    );
  }
}

interface LayoutOptions {
  readonly blockTable?: unknown;
  readonly querySeqOffsets?: unknown;
  readonly keyValueSeqOffsets?: unknown;
  readonly querySeqLengths?: unknown;
  readonly keyValueSeqLengths?: ArrayLike<number> | Tensor;
}

export function layoutOf(query: Tensor, key: Tensor, value: Tensor, options: LayoutOptions): Layout {
  const pagedAsked = options.blockTable !== undefined;
  const packedQuery = options.querySeqOffsets !== undefined;
  const packedKv = options.keyValueSeqOffsets !== undefined;
  if (!pagedAsked && !packedQuery && !packedKv) {
    const q = toBatched('query', query, 'B,T,N,H');
    const k = toBatched('key', key, 'B,S,K,H');
    const v = toBatched('value', value, 'B,S,K,Hv');
    if (q.batched !== k.batched || q.batched !== v.batched) {
      throw new InvalidArgumentError(
        'key/value',
        `the same rank as query (${q.batched ? 4 : 3})`,
        `key rank ${key.rank}, value rank ${value.rank}`,
      );
    }
    const sizes = {
      query: q.tensor.shape as unknown as Sizes4,
      key: k.tensor.shape as unknown as Sizes4,
      value: v.tensor.shape as unknown as Sizes4,
    };
    return {
      q,
      k,
      v,
      sizes,
      batched: q.batched,
      paged: null,
      packed: null,
      querySeqLengths: null,
      keyValueSeqLengths: null,
    };
  }
  if (pagedAsked && packedKv) {
    throw new InvalidArgumentError(
      'keyValueSeqOffsets',
      'undefined with a blockTable (a paged cache is addressed through its table)',
      'offsets',
    );
  }
  if (packedQuery && options.querySeqLengths !== undefined) {
    throw new InvalidArgumentError(
      'querySeqLengths',
      'undefined with querySeqOffsets (they define the lengths)',
      'lengths',
    );
  }
  if (packedKv && options.keyValueSeqLengths !== undefined) {
    throw new InvalidArgumentError(
      'keyValueSeqLengths',
      'undefined with keyValueSeqOffsets (they define the lengths)',
      'lengths',
    );
  }

  // The query: packed (totalT, N, H) with offsets, or dense (B, T, N, H).
  let B: number;
  let T: number;
  let querySeqOffsets: Int32Array | null = null;
  let querySeqLengths: Int32Array | null = null;
  if (packedQuery) {
    requireRank('query', query, 3, '(totalT, N, H)', 'packed by querySeqOffsets');
    querySeqOffsets = checkOffsets('querySeqOffsets', options.querySeqOffsets, query.shape[0], 'totalT');
    querySeqLengths = lengthsFromOffsets(querySeqOffsets);
    B = querySeqLengths.length;
    T = maxLength(querySeqLengths);
  } else {
    requireRank(
      'query',
      query,
      4,
      '(B, T, N, H)',
      pagedAsked ? 'with a paged cache' : 'with packed key/value',
    );
    B = query.shape[0];
    T = query.shape[1];
  }
  // Indexed, not destructured: array destructuring runs the iterator protocol, a slice makes an array.
  const N = query.shape[query.rank - 2];
  const H = query.shape[query.rank - 1];

  // Key and value: a paged pool, packed (totalS, K, H), or dense (B, S, K, H).
  let S: number;
  let paged: PagedKv | null = null;
  let keyValueSeqOffsets: Int32Array | null = null;
  let keyValueSeqLengths: Int32Array | null = null;
  if (pagedAsked) {
    requireRank('key', key, 4, '(numBlocks, blockSize, K, H)', 'a paged pool');
    requireRank('value', value, 4, '(numBlocks, blockSize, K, Hv)', 'a paged pool');
    const numBlocks = key.shape[0];
    const blockSize = key.shape[1];
    if (value.shape[0] !== numBlocks || value.shape[1] !== blockSize || value.shape[2] !== key.shape[2]) {
      throw new InvalidArgumentError(
        'value',
        `a pool (numBlocks=${numBlocks}, blockSize=${blockSize}, K=${key.shape[2]}, Hv) like key`,
        shapeText(value),
      );
    }
    if (numBlocks < 1 || blockSize < 1) {
      throw new InvalidArgumentError(
        'key',
        'a pool of at least one block of at least one token',
        shapeText(key),
      );
    }
    ({ paged, lengths: keyValueSeqLengths } = checkBlockTable(
      options.blockTable,
      B,
      { numBlocks, blockSize },
      options.keyValueSeqLengths,
    ));
    S = paged.maxBlocksPerSeq * blockSize;
  } else if (packedKv) {
    requireRank('key', key, 3, '(totalS, K, H)', 'packed by keyValueSeqOffsets');
    requireRank('value', value, 3, '(totalS, K, Hv)', 'packed by keyValueSeqOffsets');
    keyValueSeqOffsets = checkOffsets(
      'keyValueSeqOffsets',
      options.keyValueSeqOffsets,
      key.shape[0],
      'totalS',
    );
    if (value.shape[0] !== key.shape[0]) {
      throw new InvalidArgumentError('value', `totalS=${key.shape[0]} rows as key`, shapeText(value));
    }
    keyValueSeqLengths = lengthsFromOffsets(keyValueSeqOffsets);
    if (keyValueSeqLengths.length !== B) {
      throw new InvalidArgumentError(
        'keyValueSeqOffsets',
        `B+1=${B + 1} offsets (B=${B} sequences, as querySeqOffsets or the query's batch)`,
        `${keyValueSeqOffsets.length} (B=${keyValueSeqLengths.length})`,
      );
    }
    S = maxLength(keyValueSeqLengths);
  } else {
    requireRank('key', key, 4, '(B, S, K, H)', 'dense, with a packed query');
    requireRank('value', value, 4, '(B, S, K, Hv)', 'dense, with a packed query');
    S = key.shape[1];
  }
  const K = key.shape[key.rank - 2];
  const kH = key.shape[key.rank - 1];
  const Hv = value.shape[value.rank - 1];
  const vK = value.shape[value.rank - 2];
  // Logical batch of key/value: the pool and packed layouts serve every sequence.
  const kB = pagedAsked || packedKv ? B : key.shape[0];
  const vB = pagedAsked || packedKv ? B : value.shape[0];
  const vS = pagedAsked || packedKv ? S : value.shape[1];
  return {
    q: { tensor: query, batched: true },
    k: { tensor: key },
    v: { tensor: value },
    sizes: { query: [B, T, N, H], key: [kB, S, K, kH], value: [vB, vS, vK, Hv] },
    batched: true,
    paged,
    packed: packedQuery || packedKv ? { querySeqOffsets, keyValueSeqOffsets } : null,
    querySeqLengths,
    keyValueSeqLengths,
  };
}
