/**
 * createBlockMask on the GPU (src/kernels/variants/block_mask.cu): the mask modifier compiled into a
 * small kernel, one thread block per (b, h, query block, key block), so the mask is evaluated where its
 * captured tensors live and only the (Bm, Nm, T/blockQ, S/blockKV) kinds are written.
 */
import { Tensor } from '../../../tensor/tensor.js';
import { hashText } from '../../../variants/compile.js';
import { MAX_CAPTURE_RANK, MAX_CAPTURES } from '../../../variants/cuda.js';
import type { CompiledModifiers } from '../../../variants/types.js';
import { loadKernels } from '../runtime/compile.js';
import { i32, type KernelArg, launchKernel } from '../runtime/launch.js';
import { allocDevice } from '../runtime/memory.js';

const THREADS = 256;
const NAME = 'attnlab_block_mask';

/** AttnlabCaptures by value: ptr[8], stride[8][4], grad[8] (null: the mask has no gradient). */
export function capturesArgument(modifiers: CompiledModifiers, grads: readonly bigint[] = []): KernelArg {
  const pointers = Array.from({ length: MAX_CAPTURES }, (_, slot) => {
    const c = modifiers.captures[slot];
    return { type: 'ptr' as const, value: c ? c.tensor.buffer.ptr : 0n };
  });
  const strides = Array.from({ length: MAX_CAPTURES * MAX_CAPTURE_RANK }, (_, x) => ({
    type: 'i64' as const,
    value: modifiers.captures[Math.floor(x / MAX_CAPTURE_RANK)]?.strides[x % MAX_CAPTURE_RANK] ?? 0,
  }));
  const gradients = Array.from({ length: MAX_CAPTURES }, (_, slot) => ({
    type: 'ptr' as const,
    value: grads[slot] ?? 0n,
  }));
  return { type: 'struct', fields: [...pointers, ...strides, ...gradients] };
}

export interface BlockGrid {
  readonly Bm: number;
  readonly Nm: number;
  readonly T: number;
  readonly S: number;
  readonly blockQ: number;
  readonly blockKV: number;
}

/** The kinds tensor [Bm, Nm, qBlocks, kvBlocks] (dtype 'bool' bytes) on the GPU. */
export function blockMaskOnDevice(mask: CompiledModifiers, grid: BlockGrid): Tensor {
  const { Bm, Nm, T, S, blockQ, blockKV } = grid;
  const qBlocks = Math.ceil(T / blockQ);
  const kvBlocks = Math.ceil(S / blockKV);
  const source = mask.cudaSource;
  const fn = loadKernels({
    file: 'variants/block_mask.cu',
    kernels: [NAME],
    prelude: { source, key: `mask-${hashText(source)}` },
  }).functions.get(NAME);
  if (fn === undefined) throw new Error(`unreachable: ${NAME} not in its module`);
  const out = allocDevice(Bm * Nm * qBlocks * kvBlocks);
  launchKernel(fn, { grid: [kvBlocks, qBlocks, Bm * Nm], block: [THREADS, 1, 1] }, [
    { type: 'ptr', value: out.ptr },
    capturesArgument(mask),
    i32(Nm),
    i32(T),
    i32(S),
    i32(blockQ),
    i32(blockKV),
  ]);
  return Tensor.fromDeviceBuffer(out, [Bm, Nm, qBlocks, kvBlocks], 'bool');
}
