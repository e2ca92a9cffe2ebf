/**
 * The CUDA RingOps of context-parallel attention: row gathers as device-to-device copies, the
 * float32 accumulator, and the merge and finish kernels of src/kernels/ops/lse_merge.cu. Everything is
 * enqueued on the current device's stream (context.ts), in order with the block calls.
 */
import { UnsupportedError } from '../../../errors.js';
import { itemSize } from '../../../tensor/dtype.js';
import { Tensor } from '../../../tensor/tensor.js';
import type { Accumulator, RingOps } from '../../ring-backend.js';
import { cu } from '../ffi/driver.js';
import { loadKernels } from '../runtime/compile.js';
import { getCudaContext } from '../runtime/context.js';
import { i32, i64, launchKernel, ptr } from '../runtime/launch.js';
import { allocDevice } from '../runtime/memory.js';

const ELEM = { bfloat16: 0, float16: 1, float32: 2 } as const;
const THREADS = 256;
/** Enough blocks to fill an H200 (132 SMs × 8 resident blocks of 256 threads) a few times over. */
const MAX_BLOCKS = 132 * 8 * 4;
const NEG_INF_F32 = 0xff800000;

interface CudaAccumulator extends Accumulator {
  readonly output: Tensor;
  readonly lse: Tensor;
}

function elemOf(dtype: string): 0 | 1 | 2 {
  const elem = ELEM[dtype as keyof typeof ELEM];
  if (elem === undefined)
    throw new UnsupportedError(
      'contextParallelAttention',
      `the CUDA merge takes bfloat16, float16 or float32, not ${dtype}`,
    );
  return elem;
}

function kernel(name: string, elem: number): bigint {
  return loadKernels({
    file: 'ops/lse_merge.cu',
    kernels: [name],
    defines: { RING_ELEM: elem },
  }).functions.get(name)!;
}

function blocksFor(work: number): number {
  return Math.max(1, Math.min(MAX_BLOCKS, Math.ceil(work / THREADS)));
}

export const cudaRingOps: RingOps = {
  gather(pieces, b0, nb) {
    const { tensor: t0 } = pieces[0];
    const [, , heads, dim] = t0.shape;
    const rowBytes = heads * dim * itemSize(t0.dtype);
    const total = pieces.reduce((sum, p) => sum + p.rows.length, 0);
    const out = Tensor.fromDeviceBuffer(
      allocDevice(nb * total * rowBytes),
      [nb, total, heads, dim],
      t0.dtype,
    );
    const { stream } = getCudaContext();
    const d = cu();
    for (let b = 0; b < nb; b++) {
      let at = out.buffer.ptr + BigInt(b * total * rowBytes);
      for (const { tensor, rows } of pieces) {
        const from = tensor.buffer.ptr + BigInt(((b0 + b) * tensor.shape[1] + rows.start) * rowBytes);
        const bytes = rows.length * rowBytes;
        if (bytes > 0) d.cuMemcpyDtoDAsync_v2(at, from, bytes, stream);
        at += BigInt(bytes);
      }
    }
    return out;
  },
  accumulator(shape) {
    const { B, T, N, Hv } = shape;
    const output = Tensor.fromDeviceBuffer(allocDevice(B * T * N * Hv * 4), [B, T, N, Hv], 'float32');
    const lse = Tensor.fromDeviceBuffer(allocDevice(B * T * N * 4), [B, T, N], 'float32');
    const { stream } = getCudaContext();
    if (B * T * N > 0) {
      cu().cuMemsetD32Async(output.buffer.ptr, 0, B * T * N * Hv, stream);
      cu().cuMemsetD32Async(lse.buffer.ptr, NEG_INF_F32, B * T * N, stream);
    }
    const acc: CudaAccumulator = { shape, output, lse };
    return acc;
  },
  merge(accIn, b0, output, logSumExp, rowStart) {
    const acc = accIn as CudaAccumulator;
    const { T, N, Hv } = acc.shape;
    const [nb, rows] = output.shape;
    const partRows = nb * rows * N;
    if (partRows === 0) return;
    const elem = elemOf(output.dtype);
    const args = [
      {
        type: 'struct' as const,
        fields: [
          ptr(acc.output.buffer.ptr),
          ptr(acc.lse.buffer.ptr),
          ptr(output.buffer.ptr),
          ptr(logSumExp.buffer.ptr),
          i64(partRows),
          i32(b0),
          i32(rows),
          i32(T),
          i32(N),
          i32(Hv),
          i32(rowStart),
        ] as { type: 'ptr' | 'i32' | 'i64'; value: number | bigint }[],
      },
    ];
    launchKernel(
      kernel('attnlab_ring_merge_out', elem),
      { grid: [blocksFor(partRows * Hv), 1, 1], block: [THREADS, 1, 1] },
      args,
    );
    launchKernel(
      kernel('attnlab_ring_merge_lse', elem),
      { grid: [blocksFor(partRows), 1, 1], block: [THREADS, 1, 1] },
      args,
    );
  },
  finish(accIn, dtype) {
    const acc = accIn as CudaAccumulator;
    const { B, T, N, Hv } = acc.shape;
    const count = B * T * N * Hv;
    const elem = elemOf(dtype);
    const output = Tensor.fromDeviceBuffer(allocDevice(count * itemSize(dtype)), [B, T, N, Hv], dtype);
    if (count > 0)
      launchKernel(
        kernel('attnlab_ring_finish', elem),
        { grid: [blocksFor(count), 1, 1], block: [THREADS, 1, 1] },
        [ptr(acc.output.buffer.ptr), ptr(output.buffer.ptr), i64(count)],
      );
    acc.output.dispose();
    return { output, logSumExp: acc.lse };
  },
};
