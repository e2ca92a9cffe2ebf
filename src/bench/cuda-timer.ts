/**
 * Device time of calls through CUDA events recorded on attnlab's stream. A pool of event pairs is
 * recorded around every call and read back once at the end: reading each pair right away would
 * synchronise the host with the GPU after every call and time an idle pipeline instead of a busy one.
 */
import { getCudaContext, synchronize } from '../backends/cuda/context.js';
import { CU_EVENT_DEFAULT, cu, outBigInt } from '../backends/cuda/ffi/driver.js';

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
