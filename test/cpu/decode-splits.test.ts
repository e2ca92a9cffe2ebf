/** The decode kernel's split-count model (src/backends/cuda/flash/decode-splits.ts). */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { chooseSplitCount, splitCost } from '../../src/backends/cuda/flash/decode-splits.js';

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
  // The H200 sweep's best split counts (bench/results/2026-12-01-s6-decode, second sweep; B=1 K=8: 8 blocks).
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
