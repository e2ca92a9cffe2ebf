/**
 * Where a tensor's bytes live. Host storage is a typed array of raw values; device storage is a
 * buffer from the CUDA memory pool (src/backends/cuda/memory.ts), released to the pool on dispose.
 */
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
