/**
 * The scalar block the FP8 experiments run with: the scales calibrated delayed scaling settles on for
 * normal inputs (amax ≈ 5, so 448 / 5 for Q, K, V and O; 448 for P), with their descales.
 */
import { SCALAR_BLOCK_BYTES, SCALAR_SLOTS } from '../../src/backends/cuda/fp8/graph.js';
import { copyToDevice } from '../../src/backends/cuda/runtime/memory.js';
import type { DeviceBuffer } from '../../src/tensor/storage.js';

export function calibratedScalarBlock(): DeviceBuffer {
  const values = new Float32Array(SCALAR_BLOCK_BYTES / 4);
  const set = (slot: number, value: number) => {
    values[slot * 4] = value;
  };
  for (const s of ['Q', 'K', 'V'] as const) {
    set(SCALAR_SLOTS[`scale${s}`], 448 / 5);
    set(SCALAR_SLOTS[`descale${s}`], 5 / 448);
  }
  set(SCALAR_SLOTS.scaleS, 448);
  set(SCALAR_SLOTS.descaleS, 1 / 448);
  set(SCALAR_SLOTS.scaleO, 448 / 5);
  return copyToDevice(new Uint8Array(values.buffer));
}
