import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { InvalidArgumentError } from '../../../src/errors.js';
import { activeAutocast, autocast } from '../../../src/te/autocast.js';
import { currentScales, Fp8State } from '../../../src/te/fp8-state.js';
import {
  amaxFromHistory,
  backwardDType,
  computeScale,
  DelayedScaling,
  Float8CurrentScaling,
  Fp8TensorMeta,
  forwardDType,
  rollHistory,
} from '../../../src/te/recipe.js';

describe('recipes', () => {
  test("DelayedScaling has TE's defaults and checks its options", () => {
    const r = new DelayedScaling();
    assert.deepEqual(
      [r.margin, r.fp8Format, r.amaxHistoryLen, r.amaxComputeAlgo],
      [0, 'HYBRID', 1024, 'max'],
    );
    assert.throws(() => new DelayedScaling({ margin: -1 }), InvalidArgumentError);
    assert.throws(
      () => new DelayedScaling({ amaxHistoryLen: 0 }),
      /amaxHistoryLen: expected an integer in \[1, 1048576\]/,
    );
    // Bounded where they are given, not at the first FP8 step: a history of 1e15 entries cannot be allocated, and
    // from a margin of 128 every scale would underflow float32.
    assert.throws(
      () => new DelayedScaling({ amaxHistoryLen: 1e15 }),
      /amaxHistoryLen: expected an integer in \[1, 1048576\], got 1000000000000000/,
    );
    assert.throws(
      () => new DelayedScaling({ margin: 128 }),
      /margin: expected an integer in \[0, 127\], got 128/,
    );
    assert.equal(new DelayedScaling({ margin: 127 }).margin, 127);
    assert.throws(
      () => new DelayedScaling({ fp8Format: 'E5M2' as never }),
      /fp8Format: expected one of 'E4M3', 'HYBRID', got the string 'E5M2'$/,
    );
    assert.throws(() => new DelayedScaling({ amaxComputeAlgo: 'mean' as never }), /amaxComputeAlgo/);
    assert.equal(new Float8CurrentScaling().fp8Format, 'HYBRID');
  });

  test('formats: forward is e4m3 in both; HYBRID uses e5m2 for gradients', () => {
    assert.equal(forwardDType('E4M3'), 'float8_e4m3fn');
    assert.equal(forwardDType('HYBRID'), 'float8_e4m3fn');
    assert.equal(backwardDType('HYBRID'), 'float8_e5m2');
    assert.equal(backwardDType('E4M3'), 'float8_e4m3fn');
  });

  test('scale = (fp8max / amax) / 2^margin; zero or non-finite amax keeps the old scale', () => {
    assert.equal(computeScale(2, 448, 0, 1), 224);
    assert.equal(computeScale(2, 448, 1, 1), 112);
    assert.equal(computeScale(3, 448, 0, 1), Math.fround(448 / 3));
    assert.equal(computeScale(0, 448, 0, 7), 7);
    assert.equal(computeScale(Number.POSITIVE_INFINITY, 448, 0, 7), 7);
    assert.equal(computeScale(Number.NaN, 448, 0, 7), 7);
    assert.equal(computeScale(1e-45, 448, 0, 7), 7); // 448/1e-45 overflows float32
    assert.equal(computeScale(1e30, 448, 127, 7), 7); // underflows float32 to 0: no scale to quantise with
  });

  test('history roll: slot 0 moves to the end, the oldest drops out, slot 0 is zeroed', () => {
    const h = Float64Array.from([5, 1, 2, 3]);
    rollHistory(h);
    assert.deepEqual(Array.from(h), [0, 2, 3, 5]);
    const one = Float64Array.from([9]);
    rollHistory(one);
    assert.deepEqual(Array.from(one), [0]);
    assert.equal(amaxFromHistory(Float64Array.from([0.5, 4, 1]), 'max'), 4);
    assert.equal(amaxFromHistory(Float64Array.from([0.5, 4, 1]), 'most_recent'), 0.5);
  });

  test("delayed scaling, 'max' over 3 slots, worked by hand", () => {
    // amax 2, 4, 1, 0.5, 0.5: the 4 counts for three steps (current + two past), then drops out.
    const meta = new Fp8TensorMeta(3);
    const recipe = new DelayedScaling({ amaxHistoryLen: 3 });
    const seen: number[] = [];
    const histories: number[][] = [];
    for (const amax of [2, 4, 1, 0.5, 0.5]) {
      meta.recordDelayed(amax, recipe, 'float8_e4m3fn');
      seen.push(meta.scale);
      histories.push(Array.from(meta.amaxHistory));
    }
    assert.deepEqual(seen, [224, 112, 112, 112, 448]);
    assert.deepEqual(histories, [
      [0, 0, 2],
      [0, 2, 4],
      [0, 4, 1],
      [0, 1, 0.5],
      [0, 0.5, 0.5],
    ]);
  });

  test("delayed scaling, 'most_recent' and a margin", () => {
    const meta = new Fp8TensorMeta(3);
    const recipe = new DelayedScaling({ amaxHistoryLen: 3, amaxComputeAlgo: 'most_recent', margin: 2 });
    const seen = [2, 4, 1, 0.5].map((a) => {
      meta.recordDelayed(a, recipe, 'float8_e4m3fn');
      return meta.scale;
    });
    assert.deepEqual(seen, [56, 28, 112, 224]);
  });

  test('the module state: scale 1 before any amax (S: fp8max), five metas, reset on a new history length', () => {
    const state = new Fp8State();
    const recipe = new DelayedScaling({ amaxHistoryLen: 4 });
    assert.deepEqual(state.delayedScales(recipe), { q: 1, k: 1, v: 1, s: 448, o: 1 });
    state.record(recipe, { q: 4, k: 2, v: 1, s: 0.5, o: 0 }, 'float8_e4m3fn');
    // TE's scale_s would be 896: capped at fp8max (the kernel scales weights up to 1). amax_o = 0 keeps 1.
    assert.deepEqual(state.delayedScales(recipe), { q: 112, k: 224, v: 448, s: 448, o: 1 });
    assert.equal(state.metas?.s.scale, 896, 'the history keeps TE’s own scale');
    state.record(recipe, { q: 4, k: 2, v: 2, s: 0.5, o: 0.5 }, 'float8_e4m3fn');
    // TE's scale_o = 448 / 0.5 = 896, capped at scale_v = 448 / max(1, 2) = 224: |O| ≤ max|V|.
    assert.deepEqual(state.delayedScales(recipe), { q: 112, k: 224, v: 224, s: 448, o: 224 });
    assert.equal(state.steps, 2);
    assert.deepEqual(state.delayedScales(new DelayedScaling({ amaxHistoryLen: 2 })), {
      q: 1,
      k: 1,
      v: 1,
      s: 448,
      o: 1,
    });
  });

  test('current scaling: per-tensor scales from this amax, scale_s = fp8max, scale_o from amax_v', () => {
    assert.deepEqual(currentScales({ q: 4, k: 2, v: 8 }, 'float8_e4m3fn'), {
      q: 112,
      k: 224,
      v: 56,
      s: 448,
      o: 56,
    });
    assert.deepEqual(currentScales({ q: 0, k: 1, v: 1 }, 'float8_e4m3fn').q, 1);
  });
});

describe('autocast scoping', () => {
  test('a callback scope is visible inside, across awaits, and not outside', async () => {
    const recipe = new DelayedScaling({ amaxHistoryLen: 8 });
    assert.equal(activeAutocast(), undefined);
    const seen = await autocast({ recipe }, async () => {
      const before = activeAutocast();
      await sleep(1);
      return [before, activeAutocast()];
    });
    assert.equal(seen[0]?.recipe, recipe);
    assert.equal(seen[1]?.recipe, recipe);
    assert.equal(activeAutocast(), undefined);
  });

  test('concurrent scopes do not see each other', async () => {
    const a = new DelayedScaling({ margin: 1 });
    const b = new Float8CurrentScaling();
    const run = (recipe: DelayedScaling | Float8CurrentScaling, wait: number) =>
      autocast({ recipe }, async () => {
        await sleep(wait);
        return activeAutocast()?.recipe;
      });
    const [ra, rb] = await Promise.all([run(a, 5), run(b, 1)]);
    assert.equal(ra, a);
    assert.equal(rb, b);
  });

  test('an explicit object wins over the enclosing scope; defaults are enabled + DelayedScaling', () => {
    const explicit = autocast({ enabled: false });
    assert.equal(explicit.enabled, false);
    assert.ok(explicit.recipe instanceof DelayedScaling);
    assert.equal(explicit.fallback, false);
    autocast({ recipe: new Float8CurrentScaling() }, () => {
      assert.equal(activeAutocast(explicit), explicit);
      assert.ok(activeAutocast()?.recipe instanceof Float8CurrentScaling);
    });
    assert.throws(
      () => autocast({ recipe: {} as never }),
      /recipe: expected a DelayedScaling or Float8CurrentScaling/,
    );
    assert.throws(
      () => activeAutocast({ enabled: true } as never),
      /autocast: expected an object returned by autocast/,
    );
  });
});
