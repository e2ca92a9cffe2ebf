/** The heads decode kernel's table (src/backends/cuda/flash/decode-heads.ts): what it picks, and where it refuses. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  headsSharedBytes,
  headsSupport,
  headsTileKeys,
  headsVariant,
  headsVariantKey,
} from '../../src/backends/cuda/flash/decode-heads.js';
import type { AttentionProblem } from '../../src/backends/problem.js';

/** The fields the table reads; a host problem (no device pointers to check). */
const problem = (T: number, N: number, K: number, H: number, Hv = H) =>
  ({ B: 4, T, N, K, H, Hv, S: 4096, dtype: 'bfloat16', device: 'cpu' }) as unknown as AttentionProblem;
const LIMIT = 232448; // the H200's opt-in shared memory per block

describe('heads decode kernel table', () => {
  for (const [N, K, T, heads, rowTiles, slices, keys] of [
    [32, 8, 1, 8, 1, 1, 16], // GQA 4:1: every head of a 2 KB token row in one block, 16 keys ≈ 64 KB a stage
    [32, 4, 1, 4, 1, 2, 32],
    [8, 2, 1, 2, 1, 4, 64],
    [32, 1, 1, 1, 2, 4, 128], // MQA: 32 rows = two row tiles, four warps a tile
    [16, 1, 3, 1, 4, 2, 128], // 48 rows: four row tiles
    [32, 32, 1, 8, 1, 1, 16], // MHA: 4 blocks per token row
    [24, 3, 1, 1, 1, 8, 128], // K=3: no power of two above 1 divides it
  ] as const) {
    it(`N=${N}, K=${K}, T=${T}, H=128: ${heads} heads × ${rowTiles} row tiles × ${slices} slices, ${keys} keys`, () => {
      const v = headsVariant(problem(T, N, K, 128), 'sm_90a', LIMIT);
      assert.deepEqual([v.heads, v.rowTiles, v.slices, headsTileKeys(v)], [heads, rowTiles, slices, keys]);
      assert.equal(v.heads * v.rowTiles * v.slices, 8, 'eight warps');
      assert.ok(2 * headsTileKeys(v) <= 256, 'one thread per K or V row of a tile');
      assert.equal(v.stages, 3);
      assert.ok(headsSharedBytes(v) <= LIMIT, `${headsSharedBytes(v)} B`);
    });
  }
  it('names its configuration in the variant key', () => {
    const v = headsVariant(problem(1, 32, 8, 128, 64), 'sm_90a', LIMIT);
    assert.equal(headsVariantKey(v), 'flash-decode-heads.sm_90a.bf16.d128v64.8x1x1.k16s3');
  });
  it('takes 2 stages where 3 do not fit', () => {
    assert.equal(headsVariant(problem(1, 32, 8, 128), 'sm_90a', 150_000).stages, 2);
  });
  for (const [why, p, arch] of [
    ['sm_80 (no bulk copies)', problem(1, 32, 8, 128), 'sm_80'],
    ['H=72', problem(1, 8, 2, 72), 'sm_90a'],
    ['H=256', problem(1, 8, 2, 256), 'sm_90a'],
    ['Hv=40', problem(1, 8, 2, 64, 40), 'sm_90a'],
    ['T·N/K = 128 rows', problem(16, 8, 1, 64), 'sm_90a'],
  ] as const) {
    it(`refuses ${why}`, () => assert.equal(headsSupport(p, arch).ok, false));
  }
});
