/**
 * WebGPU buffers for tensors: uploads through a buffer mapped at creation (synchronous), reads
 * back through a staging buffer and mapAsync (asynchronous: WebGPU has no blocking read). Every
 * live buffer is counted, so memoryStats() shows what WebGPU tensors hold.
 *
 * Sizes round up to 4 bytes: WGSL reads storage in 32-bit words (a float16 tensor of 3 elements
 * is a 6-byte tensor in an 8-byte buffer).
 */
import { DeviceError, formatBytes, UnsupportedError } from '../../errors.js';
import { registerWebgpuAllocator, type WebgpuBuffer } from '../../tensor/storage.js';
import { takeUncapturedErrors, webgpuContext } from './runtime.js';

/** GPUBufferUsage and GPUMapMode by value: dawn.node defines the globals only when asked. */
export const USAGE = { MAP_READ: 1, COPY_SRC: 4, COPY_DST: 8, UNIFORM: 64, STORAGE: 128, QUERY_RESOLVE: 512 };
const MAP_READ_MODE = 1;

let liveBuffers = 0;
let liveBytes = 0;
let peakBytes = 0;

/** A tensor buffer on the device: the GPUBuffer, its size, and the device generation it belongs to. */
export interface WebgpuTensorBuffer extends WebgpuBuffer {
  readonly handle: GPUBuffer;
  readonly generation: number;
}

/** Bytes a tensor of `bytes` takes on the device. */
export function paddedBytes(bytes: number): number {
  return Math.max(4, Math.ceil(bytes / 4) * 4);
}

/**
 * A storage buffer of `bytes` (zero-filled, as WebGPU clears new buffers), or `init` copied in.
 * Refuses sizes past the device's maxBufferSize with the limit's name.
 */
export function createTensorBuffer(bytes: number, init?: Uint8Array): WebgpuTensorBuffer {
  const { device, info, generation } = webgpuContext();
  const size = paddedBytes(bytes);
  if (size > info.limits.maxBufferSize) {
    throw new UnsupportedError(
      'webgpu',
      `a buffer of ${formatBytes(size)} exceeds the device's maxBufferSize (${formatBytes(info.limits.maxBufferSize)})`,
    );
  }
  const handle = device.createBuffer({
    size,
    usage: USAGE.STORAGE | USAGE.COPY_SRC | USAGE.COPY_DST,
    mappedAtCreation: init !== undefined,
  });
  if (init) {
    new Uint8Array(handle.getMappedRange()).set(init);
    handle.unmap();
  }
  liveBuffers++;
  liveBytes += size;
  peakBytes = Math.max(peakBytes, liveBytes);
  let released = false;
  return {
    handle,
    bytes: size,
    generation,
    get released() {
      return released;
    },
    release() {
      if (released) return;
      released = true;
      liveBuffers--;
      liveBytes -= size;
      handle.destroy();
    },
  };
}

/** Throws DeviceError when `buffer` belongs to a device that was lost since it was made. */
export function checkGeneration(argument: string, buffer: WebgpuBuffer): WebgpuTensorBuffer {
  const own = buffer as WebgpuTensorBuffer;
  const { generation } = webgpuContext();
  if (own.generation !== generation) {
    throw new DeviceError(
      'WebGPU',
      argument,
      'lost',
      'the tensor was on a WebGPU device that was lost; upload its values again',
    );
  }
  return own;
}

/** Copies a buffer's first out.length bytes to the host, after the work queued before it. */
export async function readBuffer(buffer: WebgpuBuffer, out: Uint8Array): Promise<void> {
  const own = checkGeneration('readBuffer', buffer);
  const { device } = webgpuContext();
  const size = paddedBytes(out.byteLength);
  const staging = device.createBuffer({ size, usage: USAGE.MAP_READ | USAGE.COPY_DST });
  try {
    const encoder = device.createCommandEncoder();
    encoder.copyBufferToBuffer(own.handle, 0, staging, 0, size);
    device.queue.submit([encoder.finish()]);
    try {
      await staging.mapAsync(MAP_READ_MODE);
    } catch (error) {
      throw new DeviceError(
        'WebGPU',
        'mapAsync',
        'failed',
        error instanceof Error ? error.message : String(error),
      );
    }
    out.set(new Uint8Array(staging.getMappedRange(), 0, out.byteLength));
    staging.unmap();
  } finally {
    staging.destroy();
  }
  const errors = takeUncapturedErrors();
  if (errors.length > 0) throw new DeviceError('WebGPU', 'queue', 'error', errors.join('; '));
}

/** Live WebGPU buffers and their bytes (tensors not yet disposed or collected), and the peak. */
export function webgpuMemoryStats(): { webgpuBytes: number; webgpuBuffers: number; webgpuPeakBytes: number } {
  return { webgpuBytes: liveBytes, webgpuBuffers: liveBuffers, webgpuPeakBytes: peakBytes };
}

registerWebgpuAllocator({
  copyToWebgpu: (bytes) => createTensorBuffer(bytes.byteLength, bytes),
  copyFromWebgpu: readBuffer,
});
