/**
 * Where a tensor's bytes live. Host storage is a typed array of raw values; device storage is a
 * buffer from the CUDA memory pool (src/backends/cuda/runtime/memory.ts), released to the pool on dispose;
 * webgpu storage is a GPUBuffer of the WebGPU device (src/backends/webgpu/memory.ts).
 * Each device side registers itself here when it loads, so tensor/ imports nothing above the floor.
 */
import { AttnlabError } from '../errors.js';
import type { RawArray } from './dtype.js';

export type Device = 'cpu' | 'cuda' | 'webgpu';
export const DEVICES: readonly Device[] = ['cpu', 'cuda', 'webgpu'];

/** A block of device memory. `release` returns it to the pool; it is idempotent. */
export interface DeviceBuffer {
  readonly ptr: bigint;
  readonly bytes: number;
  readonly released: boolean;
  release(): void;
}

/**
 * A buffer on the WebGPU device. `handle` is the GPUBuffer (typed by the backend that made it);
 * `release` destroys it and is idempotent.
 */
export interface WebgpuBuffer {
  readonly handle: unknown;
  readonly bytes: number;
  readonly released: boolean;
  release(): void;
}

export type Storage =
  | { readonly kind: 'host'; readonly data: RawArray }
  | { readonly kind: 'device'; readonly buffer: DeviceBuffer }
  | { readonly kind: 'webgpu'; readonly buffer: WebgpuBuffer };

/** The two copies a tensor needs from the device side (src/backends/cuda/runtime/memory.ts implements them). */
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
      "no CUDA memory pool is loaded: import 'attnlab' (or src/backends/cuda/runtime/memory.ts) before moving tensors to cuda",
    );
  }
  return registered;
}

/**
 * The WebGPU side of a tensor's copies: uploads are synchronous (a buffer mapped at creation);
 * reading back is asynchronous in WebGPU (mapAsync), so it returns a promise.
 */
export interface WebgpuAllocator {
  copyToWebgpu(bytes: Uint8Array): WebgpuBuffer;
  copyFromWebgpu(buffer: WebgpuBuffer, out: Uint8Array): Promise<void>;
}

let webgpuRegistered: WebgpuAllocator | null = null;

/** Called by src/backends/webgpu/memory.ts once a WebGPU device is ready (initWebgpu). */
export function registerWebgpuAllocator(allocator: WebgpuAllocator | null): void {
  webgpuRegistered = allocator;
}

/** The WebGPU side, or an error saying to await initWebgpu() first. */
export function webgpuAllocator(): WebgpuAllocator {
  if (!webgpuRegistered) {
    throw new AttnlabError(
      "no WebGPU device is ready: await initWebgpu() (from 'attnlab' or 'attnlab/webgpu') before moving tensors to webgpu",
    );
  }
  return webgpuRegistered;
}
