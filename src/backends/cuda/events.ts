/**
 * CUDA events on attnlab's stream, for timing GPU work as Triton's do_bench does: record before and
 * after each call, synchronise once at the end, read the elapsed times. Host timers would measure
 * launch overhead and queueing instead of the kernels.
 */
import { InvalidArgumentError } from '../../api/errors.js';
import { getCudaContext, synchronize } from './context.js';
import { CU_EVENT_DEFAULT, cu, outBigInt } from './ffi/driver.js';

/** A timing event (CU_EVENT_DEFAULT). Destroy with eventDestroy when done. */
export function eventCreate(): bigint {
  getCudaContext();
  return outBigInt((slot) => cu().cuEventCreate(slot, CU_EVENT_DEFAULT));
}

/** Records `event` on the stream (attnlab's by default): it completes when the work before it does. */
export function eventRecord(event: bigint, stream: bigint = getCudaContext().stream): void {
  cu().cuEventRecord(event, stream);
}

export function eventSynchronize(event: bigint): void {
  cu().cuEventSynchronize(event);
}

/** Milliseconds between two recorded events (waits for `end`); resolution about 0.5 µs. */
export function eventElapsedMs(start: bigint, end: bigint): number {
  cu().cuEventSynchronize(end);
  const ms = new Float32Array(1);
  cu().cuEventElapsedTime(ms, start, end);
  return ms[0];
}

export function eventDestroy(event: bigint): void {
  cu().cuEventDestroy_v2(event);
}

/** Summary of a timed series, in milliseconds. */
export interface TimingSummary {
  readonly times: readonly number[];
  readonly median: number;
  readonly p10: number;
  readonly p90: number;
  readonly min: number;
  readonly mean: number;
}

/**
 * Times `fn` (which enqueues GPU work on attnlab's stream) with events around each of `iterations`
 * calls, after `warmup` untimed calls. Returns per-call device times in ms and their median/percentiles.
 *
 * @example
 * const { median } = timeOnStream(() => attention(q, k, v, { implementation: 'naive' }), { iterations: 20 });
 */
export function timeOnStream(
  fn: () => void,
  options: { iterations: number; warmup?: number },
): TimingSummary {
  const { iterations, warmup = 3 } = options;
  if (!Number.isInteger(iterations) || iterations < 1) {
    throw new InvalidArgumentError('iterations', 'a positive integer', String(iterations));
  }
  for (let i = 0; i < warmup; i++) fn();
  synchronize();
  const events = Array.from({ length: iterations + 1 }, eventCreate);
  try {
    eventRecord(events[0]);
    for (let i = 0; i < iterations; i++) {
      fn();
      eventRecord(events[i + 1]);
    }
    const times = events.slice(1).map((end, i) => eventElapsedMs(events[i], end));
    return summarize(times);
  } finally {
    for (const event of events) eventDestroy(event);
  }
}

/** Median, 10th/90th percentiles, min and mean of `times` (nearest-rank percentiles). */
export function summarize(times: readonly number[]): TimingSummary {
  const sorted = [...times].sort((a, b) => a - b);
  const rank = (q: number) =>
    sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))];
  const mid = sorted.length >> 1;
  const median = sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
  return {
    times,
    median,
    p10: rank(0.1),
    p90: rank(0.9),
    min: sorted[0],
    mean: times.reduce((a, b) => a + b, 0) / times.length,
  };
}
