/**
 * What the decode benchmarks share: device inputs of random bf16 (a 4 MiB seeded block tiled over
 * the buffer: values do not change a decode's time, and filling gigabytes on the host would), a
 * shuffled block table, and the median device time of a call after a settle period.
 */
import { getCudaContext } from '../../src/backends/cuda/context.js';
import { cu } from '../../src/backends/cuda/ffi/driver.js';
import { allocDevice, copyToDevice } from '../../src/backends/cuda/memory.js';
import { CudaEventTimer } from '../../src/bench/cuda-timer.js';
import { summarize } from '../../src/bench/stats.js';
import { randomNormal } from '../../src/tensor/random.js';
import { Tensor } from '../../src/tensor/tensor.js';

/** A device tensor of `shape` whose bytes tile a 4 MiB seeded random block. */
export function deviceRandom(shape: number[], seed: number): Tensor {
  const elements = shape.reduce((a, d) => a * d, 1);
  const block = randomNormal([Math.min(elements, 1 << 21)], { seed, dtype: 'bfloat16' }).data as Uint16Array;
  const bytes = elements * 2;
  const buffer = allocDevice(bytes);
  const tile = copyToDevice(new Uint8Array(block.buffer, block.byteOffset, block.byteLength));
  const { stream } = getCudaContext();
  for (let at = 0; at < bytes; at += tile.bytes) {
    cu().cuMemcpyDtoDAsync_v2(buffer.ptr + BigInt(at), tile.ptr, Math.min(tile.bytes, bytes - at), stream);
  }
  tile.release();
  return Tensor.fromDeviceBuffer(buffer, shape, 'bfloat16');
}

/**
 * (B, ceil(S / blockSize) + spare) pool blocks, a sequence's pages scattered as after many appends and
 * frees; `spare` unused entries (0) end each row: a serving system's fixed-width table with room for
 * the next blocks (the case where `auto` may pick cuDNN, decode-dispatch-table.ts). The pool holds
 * B · ceil(S / blockSize) blocks either way.
 */
export function shuffledTable(B: number, S: number, blockSize: number, spare = 0): Tensor {
  const blocksPerSeq = Math.ceil(S / blockSize);
  const numBlocks = B * blocksPerSeq;
  const order = Int32Array.from({ length: numBlocks }, (_, i) => i);
  for (let i = numBlocks - 1; i > 0; i--) {
    const j = (i * 2654435761) % (i + 1);
    [order[i], order[j]] = [order[j], order[i]];
  }
  if (spare === 0) return Tensor.fromRaw(order, [B, blocksPerSeq], 'int32');
  const width = blocksPerSeq + spare;
  const table = new Int32Array(B * width);
  for (let b = 0; b < B; b++) table.set(order.subarray(b * blocksPerSeq, (b + 1) * blocksPerSeq), b * width);
  return Tensor.fromRaw(table, [B, width], 'int32');
}

/** Median device ms of `call` over `repeats` timed calls after `settleMs` of back-to-back calls. */
export function medianMs(call: () => Tensor, repeats: number, settleMs: number): number {
  call().dispose();
  const end = performance.now() + settleMs;
  while (performance.now() < end) call().dispose();
  const timer = new CudaEventTimer(repeats);
  for (let i = 0; i < repeats; i++) timer.time(() => call()).dispose();
  const ms = summarize(timer.read()).median;
  timer.dispose();
  return ms;
}

/** One measured row of the decode records (results schema: bandwidthGBs / bandwidthPercent). */
export interface DecodeRow {
  label: string;
  B: number;
  S: number;
  N: number;
  K: number;
  H: number;
  layout: string;
  variant?: string;
  ms?: number;
  bandwidthGBs?: number;
  bandwidthPercent?: number;
  reason?: string;
}
