/**
 * Device copies of the small int32 arrays a paged or packed call reads (block tables, sequence
 * lengths, offsets), kept across calls and found again by their content.
 *
 * Why: uploading each such array on every call is a pageable host-to-device copy of ~10 µs however
 * small, so a paged decode step at B=1 takes ~25 µs more through the library than its kernels
 * (benchmarks/results/h200/decode/2026-12-01-row-tile-split-counts: a table and the lengths, two copies). A decode loop re-sends
 * the same table for many steps (it grows by one block per blockSize tokens), and a benchmark the
 * same table and lengths every call. Content, not identity: validation hands every backend a fresh
 * host copy (api/kv-layout.ts), and a caller may change an array in place between calls. Comparing
 * is a read of the host array (B·maxBlocksPerSeq ints: 128 at B=1 S=2k, block 16), cheaper than a
 * copy of it.
 *
 * The buffers belong to this cache: callers must not release them. An evicted one goes back to the
 * stream-ordered pool (memory.ts), which hands it only to work enqueued after the kernels that read it.
 */

import { sameInts } from '../../../tensor/same-ints.js';
import type { DeviceBuffer } from '../../../tensor/storage.js';
import { currentDeviceOrdinal } from './context.js';
import { copyInt32ToDevice } from './memory.js';

/** Entries kept: a few tables and length vectors per layout a program alternates between. */
const MAX_ENTRIES = 16;
/** Bytes kept at most (a B=128, S=8k table of 16-token blocks is 256 KB). */
const MAX_BYTES = 16 << 20;

interface Entry {
  readonly device: number;
  readonly host: Int32Array;
  readonly buffer: DeviceBuffer;
  /** The array it was uploaded from where its caller promised it never changes (int32OnDeviceUnchanging). */
  readonly source: Int32Array | null;
}

/** Most recently used first. */
const entries: Entry[] = [];
let bytesKept = 0;
let uploads = 0;

/**
 * int32OnDevice for an array its caller never changes after this call (a paged problem's block table:
 * validation's own copy, api/kv-layout.ts, which hands the same array on while the table stands): the
 * same array as the last upload's is its buffer at once, without comparing its B·M entries (a decode
 * loop's table of 65+ ints each step).
 */
export function int32OnDeviceUnchanging(values: Int32Array): DeviceBuffer {
  const last = entries[0];
  if (last !== undefined && last.source === values && last.device === currentDeviceOrdinal())
    return last.buffer;
  return int32OnDevice(values, values);
}

/** A device buffer holding `values`, uploaded only when no kept buffer holds the same ints. */
export function int32OnDevice(values: Int32Array, source: Int32Array | null = null): DeviceBuffer {
  const device = currentDeviceOrdinal();
  let at = -1;
  for (let i = 0; i < entries.length; i++) {
    const e = entries[i];
    if (e.device === device && sameInts(e.host, values)) {
      at = i;
      break;
    }
  }
  // The most recent entry is the usual hit (a decode loop's table): nothing moves.
  if (at === 0) return entries[0].buffer;
  if (at > 0) {
    const [hit] = entries.splice(at, 1);
    entries.unshift(hit);
    return hit.buffer;
  }
  const buffer = copyInt32ToDevice(values);
  uploads++;
  entries.unshift({ device, host: values.slice(), buffer, source });
  bytesKept += values.byteLength;
  while (entries.length > MAX_ENTRIES || (bytesKept > MAX_BYTES && entries.length > 1)) {
    const old = entries.pop()!;
    bytesKept -= old.host.byteLength;
    old.buffer.release();
  }
  return buffer;
}

/** Uploads made so far (tests: a repeated call makes none). */
export function int32Uploads(): number {
  return uploads;
}

/** Releases every kept buffer (tests, and a caller that wants the memory back). */
export function clearInt32Cache(): void {
  for (const e of entries.splice(0)) e.buffer.release();
  bytesKept = 0;
}
