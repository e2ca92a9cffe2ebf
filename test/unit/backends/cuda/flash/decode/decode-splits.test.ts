/** The decode kernel's split-count model (src/backends/cuda/flash/decode/decode-splits.ts). */
import assert from 'node:assert/strict';
import { afterEach, describe, it } from 'node:test';
import {
  applyDecodeTuning,
  chooseSplitCount,
  decodeTuning,
  splitCost,
} from '../../../../../../src/backends/cuda/flash/decode/decode-splits.js';
import { InvalidArgumentError } from '../../../../../../src/errors.js';

// H200: 132 SMs × 2 blocks of ~110 KB at D=128 (one or two row tiles).
const slots = 264;

describe('decode split count', () => {
  it('fills one wave instead of spilling into a second (B=8, S=128k, K=8: 64 blocks, 2048 tiles)', () => {
    const splits = chooseSplitCount({ blocks: 64, tiles: 2048, slots });
    assert.ok(64 * splits <= slots, `${splits} splits make ${64 * splits} blocks`);
    assert.equal(splits, 4);
  });
  it('does not split a grid that already has several waves of long blocks (B=64, S=16k, K=8)', () => {
    assert.equal(chooseSplitCount({ blocks: 512, tiles: 256, slots }), 1);
  });
  it('splits a single sequence across the GPU, never into slices shorter than one tile', () => {
    const splits = chooseSplitCount({ blocks: 8, tiles: 32, slots });
    assert.ok(splits > 1 && splits <= 32, `${splits}`);
    assert.equal(chooseSplitCount({ blocks: 8, tiles: 1, slots }), 1);
  });
  // The H200 sweep's best split counts (benchmarks/results/h200/decode/2026-12-01-row-tile-split-counts, second sweep; B=1 K=8: 8 blocks).
  for (const [S, best] of [
    [2048, 16],
    [8192, 32],
    [32768, 32],
    [131072, 32],
  ] as const) {
    it(`B=1, S=${S}, K=8 takes the sweep's best, ${best} splits`, () => {
      assert.equal(chooseSplitCount({ blocks: 8, tiles: S / 64, slots }), best);
    });
  }
  it('MQA (two row tiles in each of B·K = 64 blocks) fills one wave: B=64, S=16k, K=1 takes 4', () => {
    assert.equal(chooseSplitCount({ blocks: 64, tiles: 256, slots }), 4);
  });
  it('costs grow with a partial extra wave', () => {
    assert.ok(
      splitCost({ blocks: 64, tiles: 2048, slots }, 5) > splitCost({ blocks: 64, tiles: 2048, slots }, 4),
    );
  });
});

describe("decode tuning (a bench's --tuning)", () => {
  afterEach(() => {
    for (const key of Object.keys(decodeTuning)) delete decodeTuning[key as keyof typeof decodeTuning];
  });
  it('sets the fields it knows', () => {
    applyDecodeTuning({ kernel: 'tma', rowGroups: 2, splits: 8, multicast: false }, '--tuning');
    assert.deepEqual({ ...decodeTuning }, { kernel: 'tma', rowGroups: 2, splits: 8, multicast: false });
  });
  it('names an unknown key (a removed field such as prefetch) instead of ignoring it', () => {
    assert.throws(
      () => applyDecodeTuning({ prefetch: 1 }, '--tuning'),
      (e: unknown) =>
        e instanceof InvalidArgumentError &&
        e.argument === '--tuning.prefetch' &&
        /rowGroups/.test(e.expected),
    );
    assert.deepEqual({ ...decodeTuning }, {});
  });
  it('names a value a field does not take, with the values it does', () => {
    for (const [fields, key, expected] of [
      [{ splits: 0 }, 'splits', /1 … 128/],
      [{ splits: 2.5 }, 'splits', /integer/],
      [{ splits: 129 }, 'splits', /128/],
      [{ kernel: 'regs' }, 'kernel', /"rows" or "heads" or "tma"/],
      [{ boxGroup: 64 }, 'boxGroup', /0 or 8 or 16 or 32/],
      [{ multicast: 'yes' }, 'multicast', /true or false/],
    ] as const)
      assert.throws(
        () => applyDecodeTuning(fields, '--tuning'),
        (e: unknown) =>
          e instanceof InvalidArgumentError && e.argument === `--tuning.${key}` && expected.test(e.expected),
      );
  });
  it('takes an object only', () => {
    for (const fields of [null, [1], 'tma', 3])
      assert.throws(
        () => applyDecodeTuning(fields, '--tuning'),
        (e: unknown) => e instanceof InvalidArgumentError && e.argument === '--tuning',
      );
  });
});
