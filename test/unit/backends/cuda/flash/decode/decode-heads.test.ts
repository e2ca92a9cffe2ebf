/** The heads decode kernel's table (src/backends/cuda/flash/decode/decode-heads.ts): what it picks, and where it refuses. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  headsPreferred,
  headsSharedBytes,
  headsSupport,
  headsTileKeys,
  headsVariant,
  headsVariantKey,
} from '../../../../../../src/backends/cuda/flash/decode/decode-heads.js';
import type { AttentionProblem } from '../../../../../../src/backends/problem.js';

/** The fields the table reads; a host problem (no device pointers to check). */
const problem = (T: number, N: number, K: number, H: number, Hv = H, B = 8, paged = false) =>
  ({
    B,
    T,
    N,
    K,
    H,
    Hv,
    S: 16384,
    dtype: 'bfloat16',
    device: 'cpu',
    paged: paged ? { blockSize: 16 } : null,
    keyValueSeqLengths: null,
  }) as unknown as AttentionProblem;
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
      assert.equal(v.stages, v.heads === 8 ? 2 : 3, 'two stages for 8 heads of a dense cache');
      assert.ok(headsSharedBytes(v) <= LIMIT, `${headsSharedBytes(v)} B`);
    });
  }
  it('serves at most 4 kv heads a block on a paged cache or below B=8 (measured faster there)', () => {
    const paged = headsVariant(problem(1, 32, 8, 128, 128, 64, true), 'sm_90a', LIMIT);
    assert.deepEqual([paged.heads, paged.slices, headsTileKeys(paged)], [4, 2, 32]);
    assert.equal(headsVariant(problem(1, 32, 8, 128, 128, 1), 'sm_90a', LIMIT).heads, 4);
  });
  it('is preferred from 128k cached tokens (B·S, or the sum of the lengths)', () => {
    assert.equal(headsPreferred(problem(1, 32, 8, 128, 128, 8)), true);
    assert.equal(headsPreferred(problem(1, 32, 8, 128, 128, 1)), false, 'B=1 S=16k');
    const ragged = { ...problem(1, 32, 8, 128, 128, 16), keyValueSeqLengths: Int32Array.of(8000, 100) };
    assert.equal(headsPreferred(ragged as unknown as AttentionProblem), false, '8100 tokens held');
  });
  it('names its configuration in the variant key', () => {
    const v = headsVariant(problem(1, 32, 8, 128, 64), 'sm_90a', LIMIT);
    assert.equal(headsVariantKey(v), 'flash-decode-heads.sm_90a.bf16.d128v64.8x1x1.k16s2');
  });
  it('takes 2 stages where 3 do not fit', () => {
    assert.equal(headsVariant(problem(1, 32, 4, 128), 'sm_90a', 150_000).stages, 2);
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
