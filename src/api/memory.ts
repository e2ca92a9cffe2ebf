/**
 * memoryStats(): what attnlab holds, on the device (its caching pool) and on the host (storage of
 * live tensors). Reading it never initialises CUDA: on a machine without a GPU the device counters
 * are zeros.
 */
import {
  type MemoryStats as DeviceMemoryStats,
  memoryStats as deviceMemoryStats,
} from '../backends/cuda/runtime/memory.js';
import { webgpuMemoryStats } from '../backends/webgpu/memory.js';
import { hostMemoryStats } from '../tensor/lifetime.js';

export interface MemoryStats extends DeviceMemoryStats {
  /** Bytes of host tensor storage neither disposed, freed by tidy, nor collected yet. */
  readonly hostBytes: number;
  /** Host storages (one per tensor that owns its data; reshapes share) counted in hostBytes. */
  readonly hostBlocks: number;
  /** Bytes of WebGPU buffers held by live webgpu tensors (sizes rounded up to 4 bytes). */
  readonly webgpuBytes: number;
  /** WebGPU buffers counted in webgpuBytes. */
  readonly webgpuBuffers: number;
  /** The most webgpuBytes held at once. */
  readonly webgpuPeakBytes: number;
}

/**
 * Device pool counters (`currentBytes`, `liveBlocks`, `peakBytes`, `reservedBytes`,
 * `driverAllocations`, `cacheHits`), host counters (`hostBytes`, `hostBlocks`) and WebGPU counters
 * (`webgpuBytes`, `webgpuBuffers`, `webgpuPeakBytes`).
 *
 * @example
 * const before = memoryStats();
 * for (let i = 0; i < 1000; i++) tidy(() => { attention(q, k, v); });
 * memoryStats().liveBlocks === before.liveBlocks; // true: tidy freed every output
 */
export function memoryStats(): MemoryStats {
  return { ...deviceMemoryStats(), ...hostMemoryStats(), ...webgpuMemoryStats() };
}
