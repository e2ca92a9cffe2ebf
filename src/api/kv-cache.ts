/**
 * KVCache: a paged key/value cache for decoding, so that a decode loop is a few lines. It owns two
 * pools (numBlocks, blockSize, K, H) / (…, Hv), hands blocks to sequences as they grow (a free list,
 * as vLLM's block manager), writes new K/V rows into them (one kernel launch per append on the GPU),
 * and calls `attention` with the block table and lengths, causal bottom-right by default: the new
 * tokens are the last ones of each sequence.
 *
 * @example
 * const cache = new KVCache({ numBlocks: 1024, blockSize: 16, numKvHeads: 8, headDim: 128 });
 * const ids = [cache.addSequence(), cache.addSequence()];
 * for (let step = 0; step < 100; step++) {
 *   cache.append(ids, k, v);                     // k, v: (2, 1, 8, 128) on the GPU
 *   const out = cache.attention(q, ids).output;  // q: (2, 1, 32, 128) → (2, 1, 32, 128)
 * }
 */

import { checkKeys, checkOptionsObject, describeValue, snapshotList } from '../arguments.js';
import { appendFromDevice } from '../backends/cuda/ops/kv-append.js';
import { currentDeviceOrdinal } from '../backends/cuda/runtime/context.js';
import { publishLengths, withdrawLengths } from '../backends/cuda/runtime/lengths-mirror.js';
import { allocDevice, copyInt32IntoDevice, fillDevice32 } from '../backends/cuda/runtime/memory.js';
import type { AttentionOptions, AttentionResult } from '../backends/problem.js';
import { appendToWebgpuPools } from '../backends/webgpu/kv-append.js';
import { createTensorBuffer } from '../backends/webgpu/memory.js';
import { CacheFullError, InvalidArgumentError } from '../errors.js';
import { allocHost } from '../tensor/checks.js';
import type { FloatDType } from '../tensor/dtype.js';
import { sameInts } from '../tensor/same-ints.js';
import { keep } from '../tensor/scope.js';
import type { Device, DeviceBuffer } from '../tensor/storage.js';
import { checkTensor, Tensor } from '../tensor/tensor.js';
import { attention } from './attention.js';
import { markUnchangingTable } from './kv-layout.js';

export interface KVCacheOptions {
  readonly numBlocks: number;
  /** Tokens per block; the GPU decode kernel takes any size (16 and 64 are what serving systems use). */
  readonly blockSize: number;
  /** K: key/value heads. */
  readonly numKvHeads: number;
  /** H, and Hv (default H). */
  readonly headDim: number;
  readonly valueHeadDim?: number;
  /** 'bfloat16' (default) or 'float16'. */
  readonly dtype?: FloatDType;
  /** 'cpu', 'cuda' (default) or 'webgpu' (after `await initWebgpu()`). */
  readonly device?: Device;
}

interface Sequence {
  readonly blocks: number[];
  length: number;
  /** The append that last took this sequence (KVCache's #appends): whether the one under way does. */
  appended: number;
}

const INT32_MAX = 2 ** 31 - 1;

/** Sizes reach the kernels and block tables as int32: 2^31 − 1 is the largest. */
const positiveInteger = (name: string, value: unknown, max = INT32_MAX): number => {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 1 || value > max) {
    if (max !== INT32_MAX) throw new InvalidArgumentError(name, 'a positive integer', describeValue(value));
    throw new InvalidArgumentError(name, 'a positive integer ≤ 2^31 − 1 (int32)', describeValue(value));
  }
  return value;
};

/** Whether no two of `ids` are the same (SameValueZero, as a Set): a pairwise look for a decode batch's few. */
function distinct(ids: readonly unknown[]): boolean {
  if (ids.length > 16) return new Set(ids).size === ids.length;
  for (let i = 1; i < ids.length; i++)
    for (let j = 0; j < i; j++) {
      const a = ids[i];
      const b = ids[j];
      if (a === b || (Number.isNaN(a) && Number.isNaN(b))) return false;
    }
  return true;
}

const KNOWN = ['numBlocks', 'blockSize', 'numKvHeads', 'headDim', 'valueHeadDim', 'dtype', 'device'];

export class KVCache {
  readonly keyPool: Tensor;
  readonly valuePool: Tensor;
  readonly numBlocks: number;
  readonly blockSize: number;
  readonly K: number;
  readonly H: number;
  readonly Hv: number;
  readonly dtype: FloatDType;
  readonly device: Device;
  /** The free blocks, a stack: #free[0 … #freeCount − 1], the next one given out last. */
  readonly #free: Int32Array;
  #freeCount: number;
  readonly #sequences = new Map<number, Sequence>();
  #nextId = 0;
  #disposed = false;
  /** The block table attention() passed last (#attentionTable), the sequences it was made for and #blockChanges then. */
  #keptTable: Tensor | null = null;
  #keptSequences: readonly Sequence[] = [];
  #keptChanges = -1;
  /** Counts every change of any sequence's blocks (taken, given back): a kept table holds while it stands. */
  #blockChanges = 0;
  /** Counts appends (Sequence.appended). */
  #appends = 0;
  /**
   * CUDA: the device buffer an append uploads into, once: the lengths the next attention() will likely pass
   * (its last sequences', after this append), then the new rows' pool slots; published as those lengths'
   * device copy (runtime/lengths-mirror.ts), so that the decode step uploads nothing of its own.
   */
  #stepBuffer: DeviceBuffer | null = null;
  /** The device #stepBuffer lives on: an append on another one takes a buffer there. */
  #stepDevice = -1;

  constructor(optionsIn: KVCacheOptions) {
    const options = checkOptionsObject<KVCacheOptions>('options', optionsIn, 'an object of KVCache options');
    checkKeys('options', options, KNOWN);
    this.numBlocks = positiveInteger('numBlocks', options.numBlocks, Number.MAX_SAFE_INTEGER);
    // Block tables are int32 (the kernels' and cuDNN's): a pool block past 2^31 − 1 could not be named in one.
    if (this.numBlocks > INT32_MAX)
      throw new InvalidArgumentError(
        'numBlocks',
        `at most ${INT32_MAX} (int32 block tables)`,
        String(this.numBlocks),
      );
    this.blockSize = positiveInteger('blockSize', options.blockSize);
    this.K = positiveInteger('numKvHeads', options.numKvHeads);
    this.H = positiveInteger('headDim', options.headDim);
    this.Hv = positiveInteger('valueHeadDim', options.valueHeadDim ?? options.headDim);
    const dtype = options.dtype ?? 'bfloat16';
    // The decode kernel and the append copy 16-bit rows of 16-byte chunks.
    if (dtype !== 'bfloat16' && dtype !== 'float16') {
      throw new InvalidArgumentError('dtype', "'bfloat16' or 'float16'", String(dtype));
    }
    this.dtype = dtype;
    for (const [name, x] of [
      ['headDim', this.H],
      ['valueHeadDim', this.Hv],
    ] as const) {
      if (x % 8 !== 0) throw new InvalidArgumentError(name, 'a multiple of 8 (16-byte rows)', String(x));
    }
    const device = options.device ?? 'cuda';
    if (device !== 'cpu' && device !== 'cuda' && device !== 'webgpu')
      throw new InvalidArgumentError('device', "'cpu', 'cuda' or 'webgpu'", String(device));
    this.device = device;
    const slots = this.numBlocks * this.blockSize;
    this.keyPool = this.#pool([this.numBlocks, this.blockSize, this.K, this.H], slots * this.K * this.H);
    this.valuePool = this.#pool([this.numBlocks, this.blockSize, this.K, this.Hv], slots * this.K * this.Hv);
    // Lowest blocks first: a fresh cache fills its pool in order. A typed stack: a plain array of numBlocks
    // entries passes V8's array length limit near 1.3e8 blocks, where the pools themselves still fit.
    this.#free = new Int32Array(this.numBlocks);
    for (let i = 0; i < this.numBlocks; i++) this.#free[i] = this.numBlocks - 1 - i;
    this.#freeCount = this.numBlocks;
  }

  /** A new, empty sequence; its id is what append/attention/freeSequence take. */
  addSequence(): number {
    this.#live();
    const id = this.#nextId++;
    this.#sequences.set(id, { blocks: [], length: 0, appended: 0 });
    return id;
  }

  /** Returns the sequence's blocks to the pool; its id is no longer valid. */
  freeSequence(id: number): void {
    const sequence = this.#sequence(id, 'id');
    for (let i = sequence.blocks.length - 1; i >= 0; i--) this.#free[this.#freeCount++] = sequence.blocks[i];
    this.#sequences.delete(id);
    this.#blockChanges++;
  }

  sequenceLength(id: number): number {
    return this.#sequence(id, 'id').length;
  }

  get freeBlocks(): number {
    this.#live(); // after dispose() the count would be stale: the sequences' blocks were never returned
    return this.#freeCount;
  }

  /**
   * Appends Tnew tokens to each sequence of `ids`: key (B, Tnew, K, H), value (B, Tnew, K, Hv) with
   * B = ids.length, on the cache's device and in its dtype. All or nothing: a full cache throws
   * CacheFullError, and a bad id or tensor an InvalidArgumentError, before anything changes.
   */
  append(ids: readonly number[], key: Tensor, value: Tensor): void {
    const sequences = this.#sequences_(ids);
    const B = sequences.length;
    const Tnew = this.#checkRows('key', key, B, this.H);
    if (this.#checkRows('value', value, B, this.Hv) !== Tnew) {
      throw new InvalidArgumentError(
        'value',
        `Tnew=${Tnew} tokens per sequence as key`,
        `[${value.shape.join(', ')}]`,
      );
    }
    // Loops, not map/reduce/forEach callbacks: a decode step appends every few microseconds, and under tsx each
    // closure made costs a defineProperty of its name.
    const needed = new Int32Array(B);
    const blocksBefore = new Int32Array(B);
    let total = 0;
    for (let b = 0; b < B; b++) {
      const s = sequences[b];
      blocksBefore[b] = s.blocks.length;
      needed[b] = Math.ceil((s.length + Tnew) / this.blockSize) - s.blocks.length;
      total += needed[b];
    }
    if (total > this.#freeCount) throw new CacheFullError(total, this.#freeCount, this.numBlocks);
    // The pools are checked live before a block is taken: their owner may have disposed them (keyPool and
    // valuePool are public), and the write below would then fail with the blocks already handed out.
    this.#livePools();
    const freeBefore = this.#freeCount;
    for (let b = 0; b < B; b++)
      for (let i = 0; i < needed[b]; i++) sequences[b].blocks.push(this.#free[--this.#freeCount]);
    if (total > 0) this.#blockChanges++;
    try {
      this.#write(sequences, Tnew, key, value);
    } catch (error) {
      // All or nothing: taking a block only moved the stack's top, so the entries above it are still the
      // blocks taken, and resetting the counts gives every one of them back.
      this.#freeCount = freeBefore;
      for (let b = 0; b < B; b++) sequences[b].blocks.length = blocksBefore[b];
      this.#blockChanges++;
      throw error;
    }
    for (const s of sequences) s.length += Tnew;
  }

  /** Writes the Tnew new rows of each sequence into its (already taken) pool slots. */
  #write(sequences: Sequence[], Tnew: number, key: Tensor, value: Tensor): void {
    const B = sequences.length;
    const keyRow = this.K * this.H;
    const valueRow = this.K * this.Hv;
    if (this.device === 'cuda') {
      this.#writeCuda(sequences, Tnew, key, value);
      return;
    }
    const slots = new Int32Array(B * Tnew);
    this.#slots(sequences, Tnew, slots, 0);
    if (this.device === 'webgpu') {
      appendToWebgpuPools(
        {
          key,
          value,
          keyPool: this.keyPool,
          valuePool: this.valuePool,
          keyRowBytes: keyRow * 2,
          valueRowBytes: valueRow * 2,
        },
        slots,
      );
    } else {
      const scatter = (src: Tensor, pool: Tensor, row: number) => {
        const from = src.data as Uint16Array;
        const to = pool.data as Uint16Array;
        slots.forEach((slot, r) => {
          to.set(from.subarray(r * row, (r + 1) * row), slot * row);
        });
      };
      scatter(key, this.keyPool, keyRow);
      scatter(value, this.valuePool, valueRow);
    }
  }

  /** The pool slots of each sequence's Tnew new rows (its blocks already taken), into `into` from `at`. */
  #slots(sequences: Sequence[], Tnew: number, into: Int32Array, at: number): void {
    for (let b = 0; b < sequences.length; b++) {
      const s = sequences[b];
      for (let t = 0; t < Tnew; t++) {
        const position = s.length + t;
        into[at + b * Tnew + t] =
          s.blocks[Math.floor(position / this.blockSize)] * this.blockSize + (position % this.blockSize);
      }
    }
  }

  /**
   * One upload for the append and the decode step after it: the lengths of the sequences the last
   * attention() read (or of these, before any), as they will be after this append, then the new rows' slots;
   * the append kernel reads the slots there and a decode step whose lengths are those reads them there too
   * (runtime/lengths-mirror.ts finds them by content, so a guess that misses costs only the decode's own
   * upload).
   */
  #writeCuda(sequences: Sequence[], Tnew: number, key: Tensor, value: Tensor): void {
    const rows = sequences.length * Tnew;
    if (rows === 0) return;
    const mark = ++this.#appends;
    for (const s of sequences) s.appended = mark;
    const next = this.#keptSequences.length > 0 ? this.#keptSequences : sequences;
    const L = next.length;
    const values = new Int32Array(L + rows);
    for (let b = 0; b < L; b++) values[b] = next[b].length + (next[b].appended === mark ? Tnew : 0);
    this.#slots(sequences, Tnew, values, L);
    let buffer = this.#stepBuffer;
    const device = currentDeviceOrdinal();
    if (
      buffer === null ||
      buffer.released ||
      buffer.bytes < values.byteLength ||
      this.#stepDevice !== device
    ) {
      if (buffer) {
        withdrawLengths(buffer);
        buffer.release(); // stream-ordered: work already enqueued on it runs first
      }
      // Room to spare: a prefill's slots come once, a decode step's few every step.
      buffer = allocDevice(Math.max(256, 2 ** Math.ceil(Math.log2(values.byteLength))));
      this.#stepBuffer = buffer;
      this.#stepDevice = device;
    }
    withdrawLengths(buffer); // its lengths change with this upload: found again only once it is enqueued
    copyInt32IntoDevice(buffer, values);
    publishLengths(buffer, values.subarray(0, L));
    appendFromDevice(
      {
        key: key.buffer.ptr,
        value: value.buffer.ptr,
        keyPool: this.keyPool.buffer.ptr,
        valuePool: this.valuePool.buffer.ptr,
        keyRow: this.K * this.H,
        valueRow: this.K * this.Hv,
      },
      buffer.ptr + BigInt(L * 4),
      rows,
    );
  }

  #livePools(): void {
    for (const [name, pool] of [
      ['keyPool', this.keyPool],
      ['valuePool', this.valuePool],
    ] as const) {
      if (pool.disposed)
        throw new InvalidArgumentError(`cache.${name}`, 'the live pool of a live KVCache', 'a disposed pool');
    }
  }

  /** The (B, maxBlocks) block table of `ids` (unused entries 0) and their lengths. */
  blockTable(ids: readonly number[]): { table: Tensor; lengths: number[] } {
    const { entries, B, M, sequences } = this.#tableEntries(ids);
    return {
      table: Tensor.fromRaw(entries, [B, M], 'int32'),
      lengths: sequences.map((s) => s.length),
    };
  }

  #tableEntries(ids: readonly number[]) {
    return this.#entriesOf(this.#sequences_(ids));
  }

  #entriesOf(sequences: Sequence[]) {
    const B = sequences.length;
    let M = 1;
    for (const s of sequences) M = Math.max(M, s.blocks.length); // a spread of B lengths overflows the stack past ~1e5
    const entries = new Int32Array(B * M);
    for (let b = 0; b < B; b++) entries.set(sequences[b].blocks, b * M);
    return { entries, B, M, sequences };
  }

  /**
   * The table attention() passes: the last one made while its entries stay the same (a decode loop's
   * steps share it until a sequence takes a new block), kept out of any tidy() and freed with the cache.
   * A new tensor each step costs ~3 µs of a step's host time (its storage, the GC net's registration, its
   * release).
   */
  #attentionTable(ids: readonly number[]): { table: Tensor; lengths: Int32Array } {
    const kept = this.#keptTable;
    const sequences = this.#sequences_(ids);
    const B = sequences.length;
    const lengths = new Int32Array(B);
    for (let b = 0; b < B; b++) lengths[b] = sequences[b].length;
    // No block taken or given back since the kept table was made for these sequences: it holds, and its B·M
    // entries need neither a rebuild nor a compare (a decode loop's steps between block boundaries).
    if (kept && !kept.disposed && this.#keptChanges === this.#blockChanges) {
      const same = this.#keptSequences;
      let hit = same.length === B;
      for (let b = 0; hit && b < B; b++) hit = same[b] === sequences[b];
      if (hit) return { table: kept, lengths };
    }
    const { entries, M } = this.#entriesOf(sequences);
    this.#keptSequences = sequences;
    this.#keptChanges = this.#blockChanges;
    if (
      kept &&
      !kept.disposed &&
      kept.shape[0] === B &&
      kept.shape[1] === M &&
      sameInts(kept.data as Int32Array, entries)
    )
      return { table: kept, lengths };
    kept?.dispose();
    const table = keep(Tensor.fromRaw(entries, [B, M], 'int32'));
    markUnchangingTable(table);
    this.#keptTable = table;
    return { table, lengths };
  }

  /**
   * Attention of `query` (B, T, N, H) over the cached tokens of `ids` (its B sequences), causal with
   * the queries as the last T tokens of each sequence unless `options` says otherwise.
   */
  attention(query: Tensor, ids: readonly number[], optionsIn: AttentionOptions = {}): AttentionResult {
    const options = checkOptionsObject<AttentionOptions>(
      'options',
      optionsIn,
      'an object of attention options',
    );
    // The query is the caller's, the pools the cache's: a query of another dtype or device is the query's fault.
    const q = checkTensor('query', query);
    if (q.dtype !== this.dtype)
      throw new InvalidArgumentError('query.dtype', `${this.dtype} (the cache's)`, q.dtype);
    if (q.device !== this.device)
      throw new InvalidArgumentError('query.device', `${this.device} (the cache's)`, q.device);
    for (const name of ['blockTable', 'keyValueSeqLengths', 'keyValueSeqOffsets'] as const) {
      if (options[name] !== undefined) {
        throw new InvalidArgumentError(`options.${name}`, 'undefined (the cache sets it)', 'a value');
      }
    }
    // Lengths as an Int32Array: attention copies it as it is (a list is copied and remembered, ~1 µs).
    const { table, lengths } = this.#attentionTable(ids);
    // An option given as undefined means its default here too, the cache's (causal bottom-right): spread as
    // it is, `{ isCausal: undefined }` ran a non-causal call over the cache. Written into one object of a
    // fixed first shape (no dictionary-mode copy and spread: ~0.3 µs a step on the build machine).
    const merged: Record<string, unknown> = { isCausal: true, causalAlignment: 'bottom_right' };
    for (const name of Object.keys(options)) {
      const value = (options as Record<string, unknown>)[name];
      if (value !== undefined) merged[name] = value;
    }
    merged.blockTable = table;
    merged.keyValueSeqLengths = lengths;
    return attention(query, this.keyPool, this.valuePool, merged as AttentionOptions);
  }

  /** Frees the pools now (device memory back to attnlab's pool); every later call but dispose() throws. */
  dispose(): void {
    this.#disposed = true;
    this.#keptTable?.dispose();
    this.#keptTable = null;
    if (this.#stepBuffer) {
      withdrawLengths(this.#stepBuffer);
      this.#stepBuffer.release();
      this.#stepBuffer = null;
    }
    this.keyPool.dispose();
    this.valuePool.dispose();
    this.#sequences.clear();
  }

  #live(): void {
    if (this.#disposed) throw new InvalidArgumentError('cache', 'a live KVCache', 'a disposed KVCache');
  }

  /** The pools belong to the cache until its dispose(): kept out of any tidy() the cache is made in. */
  #pool(shape: number[], elements: number): Tensor {
    if (this.device === 'cpu') return keep(Tensor.fromRaw(allocHost(this.dtype, shape), shape, this.dtype));
    const bytes = elements * 2;
    // WebGPU clears a new buffer, as fillDevice32 clears the CUDA one.
    if (this.device === 'webgpu')
      return keep(Tensor.fromWebgpuBuffer(createTensorBuffer(bytes), shape, this.dtype));
    const buffer = allocDevice(bytes);
    fillDevice32(buffer, 0, Math.ceil(bytes / 4));
    return keep(Tensor.fromDeviceBuffer(buffer, shape, this.dtype));
  }

  #sequence(id: number, argument: string): Sequence {
    this.#live();
    const sequence = this.#sequences.get(id);
    if (!sequence)
      throw new InvalidArgumentError(argument, 'the id of a live sequence (addSequence)', describeValue(id));
    return sequence;
  }

  #sequences_(idsIn: readonly number[]): Sequence[] {
    this.#live();
    // Read once: the distinct check and the lookups below see the same ids, whatever a getter or Proxy does.
    // The copy stays here: not remembered (arguments.ts, copyValue).
    const ids = snapshotList('ids', idsIn, 'a non-empty array of sequence ids', false);
    if (ids.length === 0) {
      throw new InvalidArgumentError('ids', 'a non-empty array of sequence ids', describeValue(ids));
    }
    if (!distinct(ids))
      throw new InvalidArgumentError('ids', 'distinct ids', `[${ids.map(String).join(', ')}]`);
    // Every index, holes included: ids.map skips a hole, and append then wrote that row's key and value into
    // pool slot 0, another sequence's token. The name of an id is made only for its error.
    const sequences: Sequence[] = new Array(ids.length);
    for (let b = 0; b < ids.length; b++) {
      this.#live();
      const sequence = this.#sequences.get(ids[b] as number);
      if (!sequence)
        throw new InvalidArgumentError(
          `ids[${b}]`,
          'the id of a live sequence (addSequence)',
          describeValue(ids[b]),
        );
      sequences[b] = sequence;
    }
    return sequences;
  }

  /** (B, Tnew, K, X) in the cache's dtype and device; returns Tnew. */
  #checkRows(argument: string, tensor: Tensor, B: number, X: number): number {
    const t = checkTensor(argument, tensor);
    if (t.dtype !== this.dtype)
      throw new InvalidArgumentError(`${argument}.dtype`, `${this.dtype} (the cache's)`, t.dtype);
    if (t.device !== this.device) throw new InvalidArgumentError(`${argument}.device`, this.device, t.device);
    // Indexed, not destructured (the iterator protocol, twice an append).
    const b = t.shape[0];
    const tnew = t.shape[1];
    const k = t.shape[2];
    const x = t.shape[3];
    if (t.rank !== 4 || b !== B || k !== this.K || x !== X) {
      throw new InvalidArgumentError(
        argument,
        `(B=${B}, Tnew, K=${this.K}, ${X})`,
        `[${t.shape.join(', ')}]`,
      );
    }
    return tnew;
  }
}
