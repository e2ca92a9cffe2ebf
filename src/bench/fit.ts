/**
 * Whether a benchmark case can fit in this machine's memory, decided before it runs, so that a
 * sweep says up front which sizes it leaves out instead of failing (or swapping) half-way.
 *
 * The estimate is what a case cannot do without: Q, K, V and O in the case's dtype, and for the
 * naive GPU backend its (B,N,T,S) scores in float32 plus, below float32, the probabilities in the
 * input dtype beside them (at B=4, N=8, T=S=16384 that is 34 GB in float32 and 52 GB in bfloat16).
 * The CPU backends compute in float64, so on the host each element of Q, K, V and O also has an
 * 8-byte copy, and a second one beside it: the seeded inputs are drawn in float64 before rounding and the
 * oracle check decodes the output again, while the collector frees the backend's copies only later (counted
 * once, a case that fit on paper failed to allocate mid-call and V8 aborted the process). 20% of the free
 * memory is left for input rotation, workspaces and the pool.
 */
import { freemem } from 'node:os';
import { cudaAvailable } from '../backends/cuda/runtime/context.js';
import { deviceMemoryInfo, emptyCache } from '../backends/cuda/runtime/memory.js';
import { formatBytes } from '../errors.js';
import { itemSize } from '../tensor/dtype.js';
import type { Device } from '../tensor/storage.js';
import { deviceFor } from './measure.js';
import type { BenchCase } from './sweep.js';

/** The share of free memory a case may plan to use. */
const USABLE_SHARE = 0.8;

/** Bytes a case needs at the least on the device it runs on, and what they are for. */
export function caseBytes(c: BenchCase): { bytes: number; what: string } {
  const elements = 2 * c.B * c.T * c.N * c.H + 2 * c.B * c.S * c.K * c.H; // Q and O, K and V
  const size = itemSize(c.dtype);
  if (deviceFor(c.impl) === 'cpu') {
    return { bytes: elements * (size + 16), what: 'Q, K, V, O and two float64 copies of each' };
  }
  if (c.impl === 'naive') {
    const scores = c.B * c.N * c.T * c.S * (4 + (c.dtype === 'float32' ? 0 : size));
    return { bytes: elements * size + scores, what: 'Q, K, V, O and the naive (B,N,T,S) scores' };
  }
  return { bytes: elements * size, what: 'Q, K, V and O' };
}

/** Free memory where the case runs: the driver's count on a GPU, the host's available memory on the CPU. */
export function freeBytes(device: Device): number {
  return device === 'cuda' ? deviceMemoryInfo().free : freemem();
}

/** Why the case cannot fit here, or null when it can. */
export function memoryShortfall(c: BenchCase): string | null {
  const device = deviceFor(c.impl);
  const { bytes, what } = caseBytes(c);
  let free = freeBytes(device);
  // Blocks the pool keeps from an earlier, larger case count as free: hand them back first.
  if (device === 'cuda' && bytes > USABLE_SHARE * free && cudaAvailable().ok) {
    emptyCache();
    free = freeBytes(device);
  }
  if (bytes <= USABLE_SHARE * free) return null;
  const where = device === 'cuda' ? 'device memory' : 'host memory';
  return `needs ${formatBytes(bytes)} (${what}), ${formatBytes(free)} of ${where} is free`;
}

/**
 * The CPU backends' throughput bound for the time estimate: the CPU flash backend runs B=64 T=128 N=8 H=64
 * at 0.13 GFLOP/s on the 2-core build machine; 10 GFLOP/s is 75× that, more than any host here reaches, so
 * the estimate is a floor: a case it refuses would take longer still.
 */
export const CPU_FLOPS_BOUND = 10e9;

/** The default most seconds one case may be estimated to need (--max-case-s). */
export const DEFAULT_MAX_CASE_S = 3600;

/**
 * Why a CPU case cannot finish within `limitS` seconds, or null: its `calls` calls (the first, the warm-up and
 * the fewest timed ones) of `flops` each at CPU_FLOPS_BOUND. GPU cases are not estimated (at the H200's
 * ~700 TFLOP/s the largest case that fits in memory takes seconds a call).
 */
export function timeShortfall(c: BenchCase, flops: number, calls: number, limitS: number): string | null {
  if (deviceFor(c.impl) !== 'cpu') return null;
  const seconds = (calls * flops) / CPU_FLOPS_BOUND;
  if (seconds <= limitS) return null;
  return (
    `needs at least ${Math.round(seconds).toLocaleString('en-US')} s on the CPU (${calls} calls of ` +
    `${flops.toExponential(2)} flops at ≤ ${CPU_FLOPS_BOUND / 1e9} GFLOP/s), past --max-case-s ${limitS}`
  );
}
