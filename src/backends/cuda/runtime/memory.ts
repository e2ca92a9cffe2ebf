/**
 * Device memory: a caching allocator in front of cuMemAlloc, and host↔device copies on attnlab's
 * stream.
 *
 * Why a cache: cuMemAlloc/cuMemFree cost tens of microseconds and cuMemFree synchronises the device,
 * which would dominate a small attention call. Released blocks go to a free list keyed by their
 * rounded size and the next request of that size takes one back. Reuse needs no event: every backend
 * enqueues on the one stream (context.ts), so whatever used the block was enqueued before whatever
 * uses it next.
 *
 * Loading libcuda is deferred to the first allocation, so importing attnlab (which imports this
 * module through Tensor) works on a machine without a GPU.
 */
import { DeviceError, InvalidArgumentError, OutOfMemoryError } from '../../../errors.js';
import { type DeviceBuffer, registerDeviceAllocator } from '../../../tensor/storage.js';
import { cu, outBigInt } from '../ffi/driver.js';
import { currentDeviceOrdinal, getCudaContext } from './context.js';
import { STAGED_MAX_BYTES, stage } from './staging.js';

/** Below 1 MiB sizes round to 512 B; above, to 2 MiB, so a few shapes share a handful of buckets. */
const SMALL_LIMIT = 1 << 20;
const SMALL_ROUND = 512;
const LARGE_ROUND = 2 << 20;

/**
 * The name of the first of `tensors` whose device address is not a multiple of `bytes`, or undefined:
 * the kernels that copy 16-byte chunks refuse a view that starts mid-chunk (a sliced tensor).
 */
export function firstMisaligned(
  tensors: readonly (readonly [string, { readonly buffer: { readonly ptr: bigint } }])[],
  bytes = 16,
): string | undefined {
  return tensors.find(([, tensor]) => tensor.buffer.ptr % BigInt(bytes) !== 0n)?.[0];
}

export function roundAllocationSize(bytes: number): number {
  const unit = bytes <= SMALL_LIMIT ? SMALL_ROUND : LARGE_ROUND;
  return Math.max(unit, Math.ceil(bytes / unit) * unit);
}

/** Pool counters. Bytes are rounded block sizes, as the device sees them. */
export interface MemoryStats {
  /** Bytes in blocks handed out and not yet released. */
  readonly currentBytes: number;
  /** The maximum of currentBytes since start or the last resetPeakMemory(). */
  readonly peakBytes: number;
  /** Bytes held from the driver: in use plus cached in free lists. */
  readonly reservedBytes: number;
  /** Blocks handed out and not yet released. */
  readonly liveBlocks: number;
  /** cuMemAlloc calls made (a flat number in a loop means the cache is doing its job). */
  readonly driverAllocations: number;
  /** Requests served from a free list. */
  readonly cacheHits: number;
}

/** Free blocks by device ordinal, then rounded size: a block goes back to the device it came from. */
const freeListsByDevice = new Map<number, Map<number, bigint[]>>();
function freeListsOf(device: number): Map<number, bigint[]> {
  let lists = freeListsByDevice.get(device);
  if (!lists) freeListsByDevice.set(device, (lists = new Map()));
  return lists;
}
let currentBytes = 0;
let peakBytes = 0;
let reservedBytes = 0;
let liveBlocks = 0;
let driverAllocations = 0;
let cacheHits = 0;
/** When set, every block handed out is filled with 0xFF bytes (NaN in f32, f16 and bf16) first. */
let poisonByte: number | null = null;

class PooledBuffer implements DeviceBuffer {
  #released = false;
  constructor(
    readonly ptr: bigint,
    readonly bytes: number,
    readonly blockBytes: number,
    readonly device = 0,
  ) {}
  get released(): boolean {
    return this.#released;
  }
  release(): void {
    if (this.#released) return;
    this.#released = true;
    if (this.blockBytes === 0) return;
    currentBytes -= this.blockBytes;
    liveBlocks--;
    const lists = freeListsOf(this.device);
    const list = lists.get(this.blockBytes);
    if (list) list.push(this.ptr);
    else lists.set(this.blockBytes, [this.ptr]);
  }
}

/**
 * A device buffer of at least `bytes` bytes from the pool (contents undefined). Throws
 * OutOfMemoryError, with the free and total memory, when the device cannot provide it even after
 * the cache has been returned to the driver.
 */
export function allocDevice(bytes: number): DeviceBuffer {
  if (!Number.isSafeInteger(bytes) || bytes < 0) {
    throw new InvalidArgumentError('bytes', 'a non-negative safe integer', String(bytes));
  }
  // A zero-size tensor still needs a buffer object; cuMemAlloc(0) is an error, so none is made.
  if (bytes === 0) return new PooledBuffer(0n, 0, 0);
  const { stream } = getCudaContext();
  const block = roundAllocationSize(bytes);
  const device = currentDeviceOrdinal();
  let ptr = freeListsOf(device).get(block)?.pop();
  if (ptr !== undefined) cacheHits++;
  else ptr = allocateFromDriver(block, bytes);
  currentBytes += block;
  liveBlocks++;
  peakBytes = Math.max(peakBytes, currentBytes);
  if (poisonByte !== null) cu().cuMemsetD8Async(ptr, poisonByte, block, stream);
  return new PooledBuffer(ptr, bytes, block, device);
}

function allocateFromDriver(block: number, requested: number): bigint {
  const d = cu();
  const attempt = () => outBigInt((s) => d.cuMemAlloc_v2(s, block));
  let ptr: bigint;
  try {
    ptr = attempt();
  } catch (error) {
    if (!isOutOfMemory(error)) throw error;
    // Cached blocks of other sizes may be what stands in the way: give them back and try once more.
    emptyCache();
    try {
      ptr = attempt();
    } catch (retryError) {
      if (!isOutOfMemory(retryError)) throw retryError;
      const { free, total } = deviceMemoryInfo();
      throw new OutOfMemoryError(requested, free, total);
    }
  }
  driverAllocations++;
  reservedBytes += block;
  return ptr;
}

function isOutOfMemory(error: unknown): boolean {
  return error instanceof DeviceError && error.status === 'CUDA_ERROR_OUT_OF_MEMORY';
}

/** Free and total device memory as the driver sees it (cuMemGetInfo), in bytes. */
export function deviceMemoryInfo(): { free: number; total: number } {
  getCudaContext();
  const free = new BigUint64Array(1);
  const total = new BigUint64Array(1);
  cu().cuMemGetInfo_v2(free, total);
  return { free: Number(free[0]), total: Number(total[0]) };
}

/** Returns every cached (free) block of the current device to the driver. Blocks in use are not touched. */
export function emptyCache(): void {
  const freeLists = freeListsOf(currentDeviceOrdinal());
  if (freeLists.size === 0) return;
  const d = cu();
  // cuMemFree of a block the stream may still be reading is safe only after the stream drains.
  d.cuStreamSynchronize(getCudaContext().stream);
  for (const [block, list] of freeLists) {
    for (const ptr of list) {
      d.cuMemFree_v2(ptr);
      reservedBytes -= block;
    }
  }
  freeLists.clear();
}

export function memoryStats(): MemoryStats {
  return { currentBytes, peakBytes, reservedBytes, liveBlocks, driverAllocations, cacheHits };
}

/** Starts a new peak measurement from the current usage (for a benchmark's one call). */
export function resetPeakMemory(): void {
  peakBytes = currentBytes;
}

/**
 * Debugging and tests: when `byte` is a number, every block handed out is filled with it first
 * (0xFF makes f32, f16 and bf16 NaN, so an output element a kernel forgot to write shows up).
 */
export function setAllocationPoison(byte: number | null): void {
  poisonByte = byte;
}

/**
 * Copies host bytes into a new device buffer on attnlab's stream; `bytes` may change once this returns.
 * Up to STAGED_MAX_BYTES go through page-locked staging (staging.ts: ~2–3 µs of host time instead of
 * ~10); from pageable memory the driver stages the bytes itself before returning.
 */
export function copyToDevice(bytes: Uint8Array): DeviceBuffer {
  const buffer = allocDevice(bytes.byteLength);
  uploadInto(buffer.ptr, bytes);
  return buffer;
}

/**
 * int32 values rewritten into `buffer` (at least values.byteLength bytes) on attnlab's stream: work enqueued
 * before reads the old values, work after the new ones. Staged as copyToDevice stages.
 */
export function copyInt32IntoDevice(buffer: DeviceBuffer, values: Int32Array): void {
  const n = values.byteLength;
  if (n > buffer.bytes)
    throw new InvalidArgumentError(
      'values',
      `at most ${buffer.bytes} bytes (the buffer's size)`,
      `${n} bytes`,
    );
  uploadInto(buffer.ptr, new Uint8Array(values.buffer, values.byteOffset, n));
}

/** `bytes` to device address `ptr` on the stream: staged up to STAGED_MAX_BYTES (staging.ts), else pageable. */
function uploadInto(ptr: bigint, bytes: Uint8Array): void {
  const n = bytes.byteLength;
  if (n === 0) return;
  const { stream } = getCudaContext();
  const staged = n <= STAGED_MAX_BYTES ? stage(bytes) : null;
  // From pageable memory the driver stages the bytes before returning, so `bytes` may change after.
  if (staged !== null) cu().cuMemcpyHtoDAsyncFromAddress(ptr, staged, n, stream);
  else cu().cuMemcpyHtoDAsync_v2(ptr, bytes, n, stream);
}

/** int32 values (a view's own bytes only) into a new device buffer on attnlab's stream. */
export function copyInt32ToDevice(values: Int32Array): DeviceBuffer {
  return copyToDevice(new Uint8Array(values.buffer, values.byteOffset, values.byteLength));
}

/**
 * A device buffer kept for the process and replaced by a larger one when a call needs more (the
 * cuDNN workspace, the FP8 step's scalar blocks). Sharing one is safe because every user enqueues
 * on attnlab's stream in order; the one it replaces goes back to the stream-ordered pool, so work
 * already enqueued on it runs first. `prepare` is enqueued on each new buffer before its first use (the
 * decode kernel's split counters start at zero: decode.ts).
 */
export function growingDeviceBuffer(prepare?: (made: DeviceBuffer) => void): (bytes: number) => DeviceBuffer {
  // One buffer per device: a workspace must live on the device that uses it.
  const buffers = new Map<number, DeviceBuffer>();
  return (bytes) => {
    const device = currentDeviceOrdinal();
    let buffer = buffers.get(device);
    if (!buffer || buffer.bytes < bytes) {
      buffer?.release();
      buffer = allocDevice(bytes);
      prepare?.(buffer);
      buffers.set(device, buffer);
    }
    return buffer;
  };
}

/** Copies a device buffer into `out` (its first out.byteLength bytes), waiting for the stream first. */
export function copyToHost(buffer: DeviceBuffer, out: Uint8Array): void {
  if (out.byteLength > buffer.bytes) {
    throw new InvalidArgumentError(
      'out',
      `at most ${buffer.bytes} bytes (the buffer's size)`,
      `${out.byteLength} bytes`,
    );
  }
  const { stream } = getCudaContext();
  const d = cu();
  if (out.byteLength > 0) d.cuMemcpyDtoHAsync_v2(out, buffer.ptr, out.byteLength, stream);
  d.cuStreamSynchronize(stream);
}

/** Fills `count` 32-bit words of `buffer` with `word` on the stream (e.g. 0x7fc00000, a NaN). */
export function fillDevice32(buffer: DeviceBuffer, word: number, count = Math.floor(buffer.bytes / 4)): void {
  cu().cuMemsetD32Async(buffer.ptr, word >>> 0, count, getCudaContext().stream);
}

registerDeviceAllocator({ copyToDevice, copyToHost });
