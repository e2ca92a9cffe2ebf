/**
 * Device time of calls through CUDA events recorded on attnlab's stream. A pool of event pairs is
 * recorded around every call and read back once at the end: reading each pair right away would
 * synchronise the host with the GPU after every call and time an idle pipeline instead of a busy one.
 */

import { CU_EVENT_DEFAULT, cu, outBigInt } from '../backends/cuda/ffi/driver.js';
import { getCudaContext, synchronize } from '../backends/cuda/runtime/context.js';
import { InvalidArgumentError } from '../errors.js';
import { type SampleSummary, summarize } from './stats.js';

export class CudaEventTimer {
  readonly #starts: bigint[] = [];
  readonly #ends: bigint[] = [];
  #used = 0;

  /** Room for `capacity` timed calls; events are created once and reused by reset(). */
  constructor(capacity: number) {
    const d = cu();
    for (let i = 0; i < capacity; i++) {
      this.#starts.push(outBigInt((s) => d.cuEventCreate(s, CU_EVENT_DEFAULT)));
      this.#ends.push(outBigInt((s) => d.cuEventCreate(s, CU_EVENT_DEFAULT)));
    }
  }

  get capacity(): number {
    return this.#starts.length;
  }

  /** Records events on the stream around `fn` (which must only enqueue work) and returns its value. */
  time<T>(fn: () => T): T {
    if (this.#used >= this.#starts.length)
      throw new RangeError(`CudaEventTimer: all ${this.capacity} slots used`);
    const { stream } = getCudaContext();
    const d = cu();
    const i = this.#used++;
    d.cuEventRecord(this.#starts[i], stream);
    const value = fn();
    d.cuEventRecord(this.#ends[i], stream);
    return value;
  }

  /** Waits for the stream and returns the elapsed ms of each timed call, in order; then resets. */
  read(): number[] {
    synchronize();
    const d = cu();
    const out = new Float32Array(1);
    const times: number[] = [];
    for (let i = 0; i < this.#used; i++) {
      d.cuEventElapsedTime(out, this.#starts[i], this.#ends[i]);
      times.push(out[0]);
    }
    this.#used = 0;
    return times;
  }

  /** Destroys the events. */
  dispose(): void {
    const d = cu();
    for (const event of [...this.#starts, ...this.#ends]) d.cuEventDestroy_v2(event);
    this.#starts.length = 0;
    this.#ends.length = 0;
  }
}

/** A timed series: the per-call device times in ms, in order, and their summary (stats.ts). */
export interface TimedSeries extends SampleSummary {
  readonly times: readonly number[];
}

/**
 * Times `fn` (which enqueues GPU work on attnlab's stream) with events around each of `iterations`
 * calls, after `warmup` untimed calls, as Triton's do_bench does: host timers would measure launch
 * overhead and queueing instead of the kernels.
 *
 * @example
 * const { median } = timeOnStream(() => attention(q, k, v, { implementation: 'naive' }), { iterations: 20 });
 */
export function timeOnStream(fn: () => void, options: { iterations: number; warmup?: number }): TimedSeries {
  const { iterations, warmup = 3 } = options;
  if (!Number.isInteger(iterations) || iterations < 1) {
    throw new InvalidArgumentError('iterations', 'a positive integer', String(iterations));
  }
  for (let i = 0; i < warmup; i++) fn();
  synchronize();
  const timer = new CudaEventTimer(iterations);
  try {
    for (let i = 0; i < iterations; i++) timer.time(fn);
    const times = timer.read();
    return { ...summarize(times), times };
  } finally {
    timer.dispose();
  }
}
