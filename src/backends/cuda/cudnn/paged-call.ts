/**
 * The device side of one paged or packed cudnn call (the graph's tensors are in paged.ts): the page
 * table and ragged offsets uploaded for the variant pack, and, for a packed query, the two things the
 * graph leaves to attnlab — its log-sum-exp, which cuDNN writes (B, T, N) and is packed here into
 * (totalT, N) by one device copy per sequence, and the rule's zeros / −inf in rows that see no key,
 * which are contiguous runs of packed rows (a prefix cut by the right bound, a suffix by the left
 * bound, or all of a sequence without keys) written by memsets. Everything is enqueued on attnlab's
 * stream; nothing waits for the GPU.
 */
import type { DeviceBuffer } from '../../../tensor/storage.js';
import type { AttentionProblem } from '../../problem.js';
import { cu } from '../ffi/driver.js';
import { getCudaContext } from '../runtime/context.js';
import { int32OnDevice } from '../runtime/int32-cache.js';
import { allocDevice, copyInt32ToDevice, copyToDevice } from '../runtime/memory.js';
import type { CallPointers } from './execute.js';
import type { SdpaFeatures } from './features.js';

const NEG_INF_BITS = 0xff800000;

export interface LayoutCall {
  /** Pointers of the page table and the ragged offsets, by binding. */
  readonly pointers: CallPointers;
  /** Buffers of this call, released by the caller once cuDNN is enqueued. */
  readonly buffers: DeviceBuffer[];
}

/**
 * The block table with every entry a sequence does not use set to block 0: serving systems pad
 * rows with −1, and cuDNN's gather reads whole pages of the last tile, so a padding entry must
 * still name a block of the pool (what it holds is masked by the lengths).
 */
export function pageTableForCudnn(p: AttentionProblem): Int32Array {
  const paged = p.paged;
  if (!paged || !p.keyValueSeqLengths)
    throw new Error('pageTableForCudnn: a paged problem with lengths expected');
  const { blockTable, maxBlocksPerSeq: M, blockSize } = paged;
  const table = new Int32Array(p.B * M);
  for (let b = 0; b < p.B; b++) {
    const used = Math.ceil(p.keyValueSeqLengths[b] / blockSize);
    table.set(blockTable.subarray(b * M, b * M + used), b * M);
  }
  return table;
}

/** offsets[b] · width as the graph's offsets dtype, in a new device buffer. */
function uploadOffsets(offsets: Int32Array, width: number, dtype: 'int32' | 'int64'): DeviceBuffer {
  if (dtype === 'int32') return copyInt32ToDevice(Int32Array.from(offsets, (o) => o * width));
  const wide = BigInt64Array.from(offsets, (o) => BigInt(o) * BigInt(width));
  return copyToDevice(new Uint8Array(wide.buffer));
}

/** Uploads what the graph's layout tensors read; null for a dense problem. */
export function prepareLayoutCall(p: AttentionProblem, f: SdpaFeatures): LayoutCall | null {
  if (!f.paged && !f.ragged) return null;
  const pointers: CallPointers = {};
  const buffers: DeviceBuffer[] = [];
  const keep = (buffer: DeviceBuffer): bigint => {
    buffers.push(buffer);
    return buffer.ptr;
  };
  // The page table stays on the device across calls, found again by content (int32-cache.ts).
  if (f.paged) pointers.pageTable = int32OnDevice(pageTableForCudnn(p)).ptr;
  const query = p.packed?.querySeqOffsets;
  const keyValue = p.packed?.keyValueSeqOffsets;
  const dtype = f.ragged?.offsets ?? 'int32';
  if (f.ragged?.query && query) {
    pointers.raggedQuery = keep(uploadOffsets(query, p.N * p.H, dtype));
    pointers.raggedOutput = keep(uploadOffsets(query, p.N * p.Hv, dtype));
  }
  if (f.ragged?.keyValue && keyValue) {
    pointers.raggedKey = keep(uploadOffsets(keyValue, p.K * p.H, dtype));
    pointers.raggedValue = keep(uploadOffsets(keyValue, p.K * p.Hv, dtype));
  }
  return { pointers, buffers };
}

/** (B, T, N) float32 log-sum-exp → a new (totalT, N) buffer: sequence b's first T_b rows, in order. */
export function packLogSumExp(dense: DeviceBuffer, offsets: Int32Array, T: number, N: number): DeviceBuffer {
  const B = offsets.length - 1;
  const packed = allocDevice(offsets[B] * N * 4);
  const { stream } = getCudaContext();
  for (let b = 0; b < B; b++) {
    const rows = offsets[b + 1] - offsets[b];
    if (rows === 0) continue;
    const from = dense.ptr + BigInt(b * T * N * 4);
    const to = packed.ptr + BigInt(offsets[b] * N * 4);
    cu().cuMemcpyDtoDAsync_v2(to, from, rows * N * 4, stream);
  }
  return packed;
}

/**
 * Per sequence, the rows [start, end) of a packed query that see no key, as at most two runs: a
 * prefix where the right bound (i + d + right < 0) leaves nothing, a suffix where the left bound
 * (i + d − left ≥ S_b) does, or every row when S_b = 0 (d = S_b − T_b bottom-right, else 0).
 */
export function emptyPackedRuns(
  p: AttentionProblem,
  right: number | null,
  left: number | null,
  bottomRight: boolean,
): Array<[number, number]> {
  const offsets = p.packed?.querySeqOffsets;
  if (!offsets) return [];
  const runs: Array<[number, number]> = [];
  for (let b = 0; b < p.B; b++) {
    const start = offsets[b];
    const Tb = offsets[b + 1] - start;
    const Sb = p.keyValueSeqLengths ? p.keyValueSeqLengths[b] : p.S;
    if (Tb === 0) continue;
    if (Sb === 0) {
      runs.push([start, start + Tb]);
      continue;
    }
    const d = bottomRight ? Sb - Tb : 0;
    const prefix = right === null ? 0 : Math.min(Tb, Math.max(0, -(d + right)));
    const suffix = left === null ? Tb : Math.max(prefix, Math.min(Tb, Sb - d + left));
    if (prefix > 0) runs.push([start, start + prefix]);
    if (suffix < Tb) runs.push([start + suffix, start + Tb]);
  }
  return runs;
}

/** Zeros in O and −inf in the log-sum-exp of every packed row that sees no key (emptyPackedRuns). */
export function clearEmptyPackedRows(
  p: AttentionProblem,
  f: SdpaFeatures,
  foldedRight: number | null,
  output: bigint,
  logSumExp: bigint | undefined,
): void {
  const { stream } = getCudaContext();
  const d = cu();
  // A row of O is N·Hv 16-bit elements, Hv a multiple of 8: whole 32-bit words.
  const wordsPerRow = (p.N * p.Hv) / 2;
  for (const [from, to] of emptyPackedRuns(
    p,
    f.right ?? foldedRight,
    f.left,
    f.alignment === 'bottom_right',
  )) {
    d.cuMemsetD32Async(output + BigInt(from * wordsPerRow * 4), 0, (to - from) * wordsPerRow, stream);
    if (logSumExp !== undefined)
      d.cuMemsetD32Async(logSumExp + BigInt(from * p.N * 4), NEG_INF_BITS, (to - from) * p.N, stream);
  }
}
