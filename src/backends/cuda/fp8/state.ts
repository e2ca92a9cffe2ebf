/**
 * The device copy of a module's delayed-scaling state (TE keeps its fp8_metas on the GPU too), so
 * an FP8 step needs nothing from the host: a kernel writes the step's scales into the scalar block
 * and another records the step's amax values and updates the scales (src/kernels/fp8/quantise.cu).
 * The host copy (Fp8State's metas) is refreshed only when someone reads it — one synchronisation
 * then, instead of one per call.
 *
 * Layout (float32): scales of Q, K, V, S, O at 0–4, then from STATE_RINGS one ring of `length` amax
 * values per tensor. Step n writes ring slot n mod length. TE's history is rolled instead (slot 0
 * takes the step, then moves to the end); both hold the same values while a scale is computed, so
 * 'max' and 'most_recent' agree, and ringFromHistory / historyFromRing convert exactly.
 */
import type { DeviceBuffer } from '../../../tensor/storage.js';
import {
  type Fp8MetaSlot,
  type Fp8StateMirror,
  type Fp8TensorName,
  FP8_TENSORS as TENSORS,
} from '../../fp8-problem.js';
import { copyToDevice, copyToHost } from '../runtime/memory.js';

/** Where the rings start, in floats (quantise.cu's STATE_RINGS). */
export const STATE_RINGS = 8;
type Metas = Readonly<Record<Fp8TensorName, Fp8MetaSlot>>;

/**
 * A rolled host history (between steps: slot 0 is 0, slot length−1 the latest step) as a ring whose
 * next write goes to slot `step % length`, for step = length: the same array.
 */
export function ringFromHistory(history: ArrayLike<number>): Float32Array {
  return Float32Array.from(history);
}

/**
 * The rolled history of a ring after `step` writes counted from upload (the upload counts as
 * step = length): slot j ≥ 1 holds ring[(step + j) % length], slot 0 holds 0.
 */
export function historyFromRing(ring: ArrayLike<number>, step: number): Float64Array {
  const length = ring.length;
  const history = new Float64Array(length);
  for (let j = 1; j < length; j++) history[j] = ring[(step + j) % length];
  return history;
}

/** A state whose module was collected without reset() returns its buffer to the pool. */
const orphanedStates = new FinalizationRegistry<DeviceBuffer>((buffer) => buffer.release());

export class DeviceDelayedState implements Fp8StateMirror {
  readonly buffer: DeviceBuffer;
  readonly historyLength: number;
  /** Ring writes so far, counting the upload as `historyLength` (so the first write goes to slot 0). */
  #step: number;

  private constructor(buffer: DeviceBuffer, historyLength: number) {
    this.buffer = buffer;
    this.historyLength = historyLength;
    this.#step = historyLength;
    orphanedStates.register(this, buffer, this);
  }

  /** A device copy of the host metas (all five histories of one length). */
  static upload(metas: Metas): DeviceDelayedState {
    const length = metas.q.amaxHistory.length;
    const values = new Float32Array(STATE_RINGS + TENSORS.length * length);
    TENSORS.forEach((name, t) => {
      values[t] = metas[name].scale;
      values.set(ringFromHistory(metas[name].amaxHistory), STATE_RINGS + t * length);
    });
    return new DeviceDelayedState(copyToDevice(new Uint8Array(values.buffer)), length);
  }

  /** The ring slot step the next update writes, and counts it (the launch is enqueued by the caller). */
  nextStep(): number {
    return this.#step++;
  }

  /** Copies the device state into the host metas (waits for the GPU's work so far). */
  pull(metas: Metas): void {
    const length = this.historyLength;
    const values = new Float32Array(STATE_RINGS + TENSORS.length * length);
    copyToHost(this.buffer, new Uint8Array(values.buffer));
    TENSORS.forEach((name, t) => {
      metas[name].scale = values[t];
      const ring = values.subarray(STATE_RINGS + t * length, STATE_RINGS + (t + 1) * length);
      metas[name].amaxHistory.set(historyFromRing(ring, this.#step));
    });
  }

  release(): void {
    orphanedStates.unregister(this);
    this.buffer.release();
  }
}
