/**
 * Cached lengths already on the device: a KVCache writes its sequences' lengths with the same upload as an
 * append's pool slots (one cuMemcpyHtoDAsync for both, api/kv-cache.ts) and publishes that device copy here
 * with the values it holds; a decode step whose lengths equal them reads them there instead of uploading
 * its own (flash/decode/decode.ts). That takes a KVCache decode step from two uploads to one: a
 * page-locked upload is 2–3 µs of host time on an H100 (docs/internals/host-time.md).
 *
 * Found by content, on the same device: every write of a published buffer is enqueued on attnlab's stream
 * before `values` changes, so work enqueued after a match reads exactly `values`, whichever sequences they
 * belong to.
 */

import { sameInts } from '../../../tensor/same-ints.js';
import type { DeviceBuffer } from '../../../tensor/storage.js';
import { currentDeviceOrdinal } from './context.js';

interface Mirror {
  readonly device: number;
  readonly buffer: DeviceBuffer;
  /** What the buffer holds from its start, as int32, for work enqueued from now on. */
  readonly values: Int32Array;
}

/** One per live KVCache that published; the last published first. A few: a search a decode step pays. */
const mirrors: Mirror[] = [];
const KEPT = 4;

/**
 * Publishes `buffer` (on the current device) as holding `values` from its start, for work enqueued from now
 * on; the caller keeps `values` equal to what it enqueued into the buffer last, or withdraws it first.
 */
export function publishLengths(buffer: DeviceBuffer, values: Int32Array): void {
  withdrawLengths(buffer);
  mirrors.unshift({ device: currentDeviceOrdinal(), buffer, values });
  if (mirrors.length > KEPT) mirrors.pop();
}

/** Stops finding `buffer` (about to be rewritten out of step with its values, or released). */
export function withdrawLengths(buffer: DeviceBuffer): void {
  for (let i = 0; i < mirrors.length; i++)
    if (mirrors[i].buffer === buffer) {
      mirrors.splice(i, 1);
      return;
    }
}

/** A published device copy of exactly `values` on the current device, or null. */
export function mirroredLengths(values: Int32Array): DeviceBuffer | null {
  if (mirrors.length === 0) return null;
  const device = currentDeviceOrdinal();
  for (const m of mirrors)
    if (
      m.device === device &&
      !m.buffer.released &&
      m.values.length === values.length &&
      sameInts(m.values, values)
    )
      return m.buffer;
  return null;
}
