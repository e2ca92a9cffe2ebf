/**
 * The device copy of delayed scaling keeps a ring where TE rolls its history
 * (src/backends/cuda/fp8/state.ts). These tests replay steps on both forms and check that they hold
 * the same values when a scale is computed, and that converting back gives TE's history exactly.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { historyFromRing, ringFromHistory } from '../../../../../src/backends/cuda/fp8/state.js';
import { amaxFromHistory, DelayedScaling, Fp8TensorMeta } from '../../../../../src/te/recipe.js';
import { Random } from '../../../../../src/tensor/random.js';

/** A ring step as the update kernel does it: write slot step % length, read the amax. */
function ringStep(ring: Float32Array, step: number, amax: number, algo: 'max' | 'most_recent'): number {
  ring[step % ring.length] = amax;
  return algo === 'most_recent' ? amax : ring.reduce((m, x) => Math.max(m, x), 0);
}

describe('delayed scaling on the device: ring vs rolled history', () => {
  for (const length of [1, 2, 3, 7]) {
    for (const algo of ['max', 'most_recent'] as const) {
      test(`history length ${length}, ${algo}: same amax every step, same history after`, () => {
        const generator = new Random(length * 31 + (algo === 'max' ? 1 : 2));
        const random = () => generator.nextUint32() / 2 ** 32;
        const recipe = new DelayedScaling({ amaxHistoryLen: length, amaxComputeAlgo: algo });
        const meta = new Fp8TensorMeta(length);
        // Some host steps first, so the upload starts from a history already rolled.
        for (let i = 0; i < 5; i++) meta.recordDelayed(Math.fround(random() * 10), recipe, 'float8_e4m3fn');
        const ring = ringFromHistory(meta.amaxHistory);
        let step = length; // the upload counts as `length` writes
        for (let i = 0; i < 3 * length + 4; i++) {
          const amax = Math.fround(random() * 10);
          // What TE computes from: slot 0 holds this step before the roll.
          const host = Float64Array.from(meta.amaxHistory);
          host[0] = amax;
          assert.equal(ringStep(ring, step++, amax, algo), amaxFromHistory(host, algo), `step ${i}`);
          meta.recordDelayed(amax, recipe, 'float8_e4m3fn');
          assert.deepEqual(historyFromRing(ring, step), meta.amaxHistory, `history after step ${i}`);
        }
      });
    }
  }
});
