/**
 * decode-bench's block tables (benchmarks/harnesses/decode-timing.ts, pageTable): every order is a permutation of the
 * pool, and 'interleaved' is the table KVCache itself builds for sequences that grow a token at a time from an
 * empty pool — the layout the benchmark claims to stand for.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { KVCache } from '../../../src/api/kv-cache.js';
import { pageTable, TABLE_ORDERS, type TableOrder } from '../../../src/bench/page-table.js';
import { InvalidArgumentError } from '../../../src/errors.js';
import { Tensor } from '../../../src/tensor/tensor.js';

describe('decode-bench block tables', () => {
  it('every order hands out each pool block once', () => {
    for (const order of TABLE_ORDERS) {
      const table = pageTable(5, 70, 16, 0, order);
      assert.deepEqual(table.shape, [5, 5]);
      const blocks = Array.from(table.data as Int32Array).sort((a, b) => a - b);
      assert.deepEqual(
        blocks,
        Array.from({ length: 25 }, (_, i) => i),
        order,
      );
    }
  });

  it("'interleaved' is the table KVCache builds for sequences that grow a token at a time", () => {
    const [B, S, blockSize, K, H] = [3, 50, 4, 1, 8];
    const cache = new KVCache({
      numBlocks: B * Math.ceil(S / blockSize),
      blockSize,
      numKvHeads: K,
      headDim: H,
      device: 'cpu',
    });
    const ids = Array.from({ length: B }, () => cache.addSequence());
    const token = Tensor.fromRaw(new Uint16Array(B * K * H), [B, 1, K, H], 'bfloat16');
    for (let t = 0; t < S; t++) cache.append(ids, token, token);
    const built = cache.blockTable(ids).table;
    assert.deepEqual(
      Array.from(built.data as Int32Array),
      Array.from(pageTable(B, S, blockSize, 0, 'interleaved').data as Int32Array),
    );
    assert.notDeepEqual(
      Array.from(built.data as Int32Array),
      Array.from(pageTable(B, S, blockSize, 0, 'sequential').data as Int32Array),
      'a prompt appended at once would be sequential; a token at a time is not',
    );
  });

  it('names an order it does not know', () => {
    assert.throws(() => pageTable(2, 32, 16, 0, 'random' as TableOrder), InvalidArgumentError);
  });
});
