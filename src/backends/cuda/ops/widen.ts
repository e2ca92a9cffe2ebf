/**
 * A float32 copy of a bfloat16/float16 device tensor (src/kernels/ops/widen.cu), exact: every 16-bit
 * value is a float32 one. Saves the round trip through the host (and its JS decode of every element).
 */
import type { FloatDType } from '../../../tensor/dtype.js';
import { Tensor } from '../../../tensor/tensor.js';
import { loadKernels } from '../runtime/compile.js';
import { i64, launchKernel, ptr } from '../runtime/launch.js';
import { allocDevice } from '../runtime/memory.js';

const THREADS = 256;

export function widenToFloat32(t: Tensor): Tensor {
  const dtype = t.dtype as FloatDType;
  if (dtype !== 'bfloat16' && dtype !== 'float16') throw new Error(`unreachable: widen ${dtype}`);
  const name = `attnlab_widen<${dtype === 'bfloat16' ? 'bf16_t' : 'f16_t'}>`;
  const fn = loadKernels({ file: 'ops/widen.cu', kernels: [name] }).functions.get(name);
  if (fn === undefined) throw new Error(`unreachable: ${name} not in its module`);
  const out = allocDevice(t.size * 4);
  if (t.size > 0) {
    launchKernel(fn, { grid: [Math.ceil(t.size / THREADS), 1, 1], block: [THREADS, 1, 1] }, [
      ptr(t.buffer.ptr),
      ptr(out.ptr),
      i64(t.size),
    ]);
  }
  return Tensor.fromDeviceBuffer(out, t.shape, 'float32');
}
