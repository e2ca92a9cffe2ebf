/** Every size option of the TE module and the KV cache is bounded by int32, the width sizes reach kernels in. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { DotProductAttention, InvalidArgumentError, KVCache } from '../../../src/index.js';

const refused = (argument: string) => (e: unknown) =>
  e instanceof InvalidArgumentError && e.argument === argument && /2\^31 − 1/.test(e.message);

describe('size options past int32 are refused by name', () => {
  for (const huge of [2 ** 31, 2 ** 40, Number.MAX_SAFE_INTEGER]) {
    it(`DotProductAttention with ${huge}`, () => {
      assert.throws(
        () => new DotProductAttention({ headDim: 64, numAttentionHeads: huge }),
        refused('numAttentionHeads'),
      );
      assert.throws(
        () => new DotProductAttention({ headDim: huge, numAttentionHeads: 8 }),
        refused('headDim'),
      );
      assert.throws(
        () => new DotProductAttention({ headDim: [64, huge], numAttentionHeads: 8 }),
        refused('headDim[1]'),
      );
      assert.throws(
        () => new DotProductAttention({ headDim: 64, numAttentionHeads: 8, numGqaGroups: huge }),
        refused('numGqaGroups'),
      );
    });
    it(`KVCache with ${huge}`, () => {
      const base = { numBlocks: 1, blockSize: 1, numKvHeads: 1, headDim: 8, device: 'cpu' as const };
      for (const key of ['blockSize', 'numKvHeads', 'headDim', 'valueHeadDim'] as const) {
        assert.throws(() => new KVCache({ ...base, [key]: huge }), refused(key));
      }
    });
  }
  it('the largest int32 size is a valid configuration', () => {
    assert.equal(
      new DotProductAttention({ headDim: 64, numAttentionHeads: 2 ** 31 - 1 }).config.N,
      2 ** 31 - 1,
    );
  });
});
