/** The CUDA device's UUID, the name nvidia-smi and NVML know a GPU by (results files, gpu-power.ts). */
import { cu } from '../backends/cuda/ffi/driver.js';

/** The device's UUID as nvidia-smi writes it (GPU-8-4-4-4-12 hex digits), or undefined where the driver has none. */
export function gpuUuid(ordinal: number): string | undefined {
  try {
    const bytes = new Uint8Array(16);
    cu().cuDeviceGetUuid_v2(bytes, ordinal);
    const hex = Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('');
    return `GPU-${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
  } catch {
    return undefined;
  }
}
