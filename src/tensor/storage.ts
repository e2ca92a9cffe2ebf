/**
 * Where a tensor's bytes live. Host storage is a typed array of raw values; device storage is a
 * buffer from the CUDA memory pool (src/backends/cuda/memory.ts), released to the pool on dispose.
 * The pool registers itself here when it loads, so tensor/ imports nothing above the floor.
 */
import { AttnlabError } from '../errors.js';
import type { RawArray } from './dtype.js';

export type Device = 'cpu' | 'cuda';

/** A block of device memory. `release` returns it to the pool; it is idempotent. */
export interface DeviceBuffer {
  readonly ptr: bigint;
  readonly bytes: number;
  readonly released: boolean;
  release(): void;
}

export type Storage =
  | { readonly kind: 'host'; readonly data: RawArray }
  | { readonly kind: 'device'; readonly buffer: DeviceBuffer };

/** The two copies a tensor needs from the device side (src/backends/cuda/memory.ts implements them). */
export interface DeviceAllocator {
  copyToDevice(bytes: Uint8Array): DeviceBuffer;
  copyToHost(buffer: DeviceBuffer, out: Uint8Array): void;
}

let registered: DeviceAllocator | null = null;

/** Called once by the CUDA memory pool as it loads. */
export function registerDeviceAllocator(allocator: DeviceAllocator): void {
  registered = allocator;
}

/** The registered pool; every entry point (src/index.ts) loads it through the backend registry. */
export function deviceAllocator(): DeviceAllocator {
  if (!registered) {
    throw new AttnlabError(
      "no CUDA memory pool is loaded: import 'attnlab' (or src/backends/cuda/memory.ts) before moving tensors to cuda",
    );
  }
  return registered;
}
