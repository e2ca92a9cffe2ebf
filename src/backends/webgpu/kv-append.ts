/**
 * KVCache's append on WebGPU: each new token's key and value row (K·H and K·Hv 16-bit values)
 * copied into its pool slot with copyBufferToBuffer, all in one command buffer. Rows are
 * multiples of 16 bytes (KVCache asks H and Hv to be multiples of 8), within copyBufferToBuffer's
 * 4-byte alignment.
 */
import type { Tensor } from '../../tensor/tensor.js';
import { checkGeneration } from './memory.js';
import { webgpuContext } from './runtime.js';

/** Copies row r of key/value (B·Tnew rows) to pool slot slots[r], in queue order with other work. */
export function appendToWebgpuPools(
  rows: {
    key: Tensor;
    value: Tensor;
    keyPool: Tensor;
    valuePool: Tensor;
    keyRowBytes: number;
    valueRowBytes: number;
  },
  slots: Int32Array,
): void {
  const { device } = webgpuContext();
  const key = checkGeneration('key', rows.key.webgpuBuffer).handle;
  const value = checkGeneration('value', rows.value.webgpuBuffer).handle;
  const keyPool = checkGeneration('keyPool', rows.keyPool.webgpuBuffer).handle;
  const valuePool = checkGeneration('valuePool', rows.valuePool.webgpuBuffer).handle;
  const encoder = device.createCommandEncoder();
  slots.forEach((slot, r) => {
    encoder.copyBufferToBuffer(key, r * rows.keyRowBytes, keyPool, slot * rows.keyRowBytes, rows.keyRowBytes);
    encoder.copyBufferToBuffer(
      value,
      r * rows.valueRowBytes,
      valuePool,
      slot * rows.valueRowBytes,
      rows.valueRowBytes,
    );
  });
  device.queue.submit([encoder.finish()]);
}
