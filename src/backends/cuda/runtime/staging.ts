/**
 * Pinned host staging for small uploads (a KVCache append's slots, a decode step's grown lengths, a
 * small tensor). From pageable memory cuMemcpyHtoDAsync copies the bytes into the driver's own staging
 * before it returns (~10 µs of host time a call on an H100, driver 580); from page-locked memory it only
 * enqueues the DMA (~2–3 µs). So small uploads are first copied here, into a ring of page-locked memory
 * (cuMemHostAlloc), and the copy is enqueued from there.
 *
 * A staged byte must stay unchanged until the stream has run its copy. The ring is cut into SEGMENTS;
 * leaving a segment records an event on the stream, and entering one again first waits on the event it
 * recorded a full lap ago (4,096 uploads of up to 16 bytes a segment: by then the GPU has long passed it,
 * so the wait returns at once).
 */
import koffi from 'koffi';
import { config } from '../../../config.js';
import { DeviceError } from '../../../errors.js';
import { CU_EVENT_DISABLE_TIMING, cu, outBigInt } from '../ffi/driver.js';
import { currentDeviceOrdinal, getCudaContext } from './context.js';

/** 1 MiB of page-locked memory a device, in 16 segments of 64 KiB. */
const SEGMENTS = 16;
const SEGMENT_BYTES = 64 << 10;
/** Uploads up to this size are staged (a decode step's lengths at B=64 are 256 B; a B=1 append's slot 4 B). */
export const STAGED_MAX_BYTES = 16 << 10;
/** Each staged upload starts on a 16-byte boundary (DMA engines move aligned chunks fastest). */
const ALIGN = 16;
/** CU_MEMHOSTALLOC_PORTABLE: page-locked for every context, as the ring serves any device's stream. */
const CU_MEMHOSTALLOC_PORTABLE = 1;

interface Ring {
  readonly address: bigint;
  readonly bytes: Uint8Array;
  /** The next free byte and the segment it lies in. */
  offset: number;
  segment: number;
  /** Per segment, the event recorded when it was left (0n: never left). */
  readonly events: bigint[];
}

/** Per device, its ring, or null where the driver refused page-locked memory (uploads then go pageable). */
const rings = new Map<number, Ring | null>();

/** Counters for tests: segments left (each an event record) and waits on an event a lap old. */
export const stagingStats = { staged: 0, segmentsLeft: 0, waits: 0 };

function ringOf(device: number): Ring | null {
  let ring = rings.get(device);
  if (ring !== undefined) return ring;
  const total = SEGMENTS * SEGMENT_BYTES;
  const slot: unknown[] = [null];
  try {
    cu().cuMemHostAlloc(slot, total, CU_MEMHOSTALLOC_PORTABLE);
  } catch (error) {
    // A limit on locked memory (ulimit -l, a container's) refuses it: pageable uploads, as without staging.
    if (!(error instanceof DeviceError)) throw error;
    if (config().debug >= 1)
      console.error(
        `[attnlab] no page-locked staging (${error.message}): small uploads from pageable memory`,
      );
    rings.set(device, null);
    return null;
  }
  const pointer = slot[0];
  const address = typeof pointer === 'bigint' ? pointer : koffi.address(pointer);
  ring = {
    address,
    bytes: new Uint8Array(koffi.view(pointer, total)),
    offset: 0,
    segment: 0,
    events: new Array<bigint>(SEGMENTS).fill(0n),
  };
  rings.set(device, ring);
  return ring;
}

/**
 * The host address of a page-locked copy of `bytes` (at most STAGED_MAX_BYTES), valid for a copy
 * enqueued on the current device's stream now; null where the device has no ring (copy from `bytes`).
 */
export function stage(bytes: Uint8Array): bigint | null {
  const ring = ringOf(currentDeviceOrdinal());
  if (ring === null) return null;
  const size = Math.ceil(bytes.byteLength / ALIGN) * ALIGN;
  if (ring.offset + size > (ring.segment + 1) * SEGMENT_BYTES) enterNextSegment(ring);
  const at = ring.offset;
  ring.bytes.set(bytes, at);
  ring.offset = at + size;
  stagingStats.staged++;
  return ring.address + BigInt(at);
}

function enterNextSegment(ring: Ring): void {
  const d = cu();
  const { stream } = getCudaContext();
  const left = ring.segment;
  if (ring.events[left] === 0n)
    ring.events[left] = outBigInt((s) => d.cuEventCreate(s, CU_EVENT_DISABLE_TIMING));
  d.cuEventRecord(ring.events[left], stream);
  stagingStats.segmentsLeft++;
  const next = (left + 1) % SEGMENTS;
  // Recorded a lap ago, after every copy from this segment was enqueued.
  if (ring.events[next] !== 0n) {
    d.cuEventSynchronize(ring.events[next]);
    stagingStats.waits++;
  }
  ring.segment = next;
  ring.offset = next * SEGMENT_BYTES;
}
