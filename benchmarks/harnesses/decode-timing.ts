/**
 * What the decode benchmarks share: device inputs of random bf16 (a 4 MiB seeded block tiled over
 * the buffer: values do not change a decode's time, and filling gigabytes on the host would), a
 * block table (pages shuffled or in pool order), and the median device time of a call (alone or in
 * batches) after a settle period.
 */

import { cu } from '../../src/backends/cuda/ffi/driver.js';
import { getCudaContext } from '../../src/backends/cuda/runtime/context.js';
import { allocDevice, copyToDevice } from '../../src/backends/cuda/runtime/memory.js';
import { CudaEventTimer } from '../../src/bench/cuda-timer.js';
import type { PowerWindow } from '../../src/bench/gpu-power.js';
import { summarize } from '../../src/bench/stats.js';

export { pageTable, TABLE_ORDERS, type TableOrder } from '../../src/bench/page-table.js';

import { InvalidArgumentError } from '../../src/errors.js';
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
 * Median device ms of one `call` over `repeats` timed samples after `settleMs` of back-to-back calls.
 * A sample is `batch` calls enqueued back to back between one event pair, divided by `batch`: with one
 * call a sample (batch 1), a call whose host time (43–185 µs on the device machine) nears its
 * device time (125–130 µs at B=64 S=16k K=1) pays the event records and any host stall inside its pair,
 * and rows varied by up to 25% with their order (benchmarks/results/h200/decode/2026-12-02-k1-vs-pytorch-call-timing); 50 calls a
 * pair read the same dense call at 4.19–4.29 TB/s where one a pair read 4.10.
 */
export function medianMs(call: () => Tensor, repeats: number, settleMs: number, batch = 1): number {
  if (!Number.isInteger(batch) || batch < 1)
    throw new InvalidArgumentError('batch', 'an integer ≥ 1', String(batch));
  call().dispose();
  const end = performance.now() + settleMs;
  while (performance.now() < end) call().dispose();
  const timer = new CudaEventTimer(repeats);
  for (let i = 0; i < repeats; i++)
    timer
      .time(() => {
        for (let j = 1; j < batch; j++) call().dispose();
        return call();
      })
      .dispose();
  const ms = summarize(timer.read()).median / batch;
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
  /** Device ms of a call with the host's time hidden behind a GPU spin (src/bench/hidden-host.ts). */
  kernelsMs?: number;
  kernelsGBs?: number;
  hostUsPerCall?: number;
  /** Why the kernels-alone timing has no value (the host outlasted the longest spin). */
  kernelsReason?: string;
  /** The GPU's power state over the calls and over the kernels-alone timing (src/bench/gpu-power.ts). */
  power?: PowerWindow;
  kernelsPower?: PowerWindow;
  /** When each timing ran, ISO UTC [start, end]: per call, then the kernels alone. */
  measuredAt?: { perCall: [string, string]; kernels?: [string, string] };
  reason?: string;
}
