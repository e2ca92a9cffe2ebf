/**
 * KVCache on the CPU: a decode loop that appends one token per step equals, row for row
 * and bit for bit, one causal prefill over the final sequences (float64 reference arithmetic on the
 * same bf16 values); blocks are handed out and returned; a full cache changes nothing and says why.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { attention } from '../../../src/api/attention.js';
import { KVCache } from '../../../src/api/kv-cache.js';
import { CacheFullError, InvalidArgumentError, OutOfMemoryError } from '../../../src/errors.js';
import { randomNormal } from '../../../src/tensor/random.js';
import { Tensor } from '../../../src/tensor/tensor.js';
import { sliceRows } from '../../support/kv-layouts.js';

/** 4 blocks of 2 float16 rows on the CPU, head dim 8. */
const smallFloat16Cache = (numKvHeads: number) =>
  new KVCache({ numBlocks: 4, blockSize: 2, numKvHeads, headDim: 8, device: 'cpu', dtype: 'float16' });

describe('KVCache', () => {
  it('the table attention passes follows every block taken or given back, and the ids asked for', () => {
    // blockSize 2: a new block every other step; a sequence freed and one added take freed blocks; the same
    // ids across steps (the kept table's case), then in the other order and alone. Each call's result
    // equals the same call with the table made afresh.
    const cache = new KVCache({ numBlocks: 24, blockSize: 2, numKvHeads: 1, headDim: 8, device: 'cpu' });
    const row = (seed: number) => randomNormal([1, 1, 1, 8], { seed, dtype: 'bfloat16' });
    const live = [cache.addSequence(), cache.addSequence()];
    let seed = 1;
    const check = (ids: number[], step: number) => {
      const q = randomNormal([ids.length, 1, 2, 8], { seed: 1000 + step, dtype: 'bfloat16' });
      const got = cache.attention(q, ids, { implementation: 'reference' });
      const { table, lengths } = cache.blockTable(ids);
      const want = attention(q, cache.keyPool, cache.valuePool, {
        isCausal: true,
        causalAlignment: 'bottom_right',
        blockTable: table,
        keyValueSeqLengths: lengths,
        implementation: 'reference',
      });
      assert.deepEqual(got.output.toFloat64Array(), want.output.toFloat64Array(), `step ${step}, ids ${ids}`);
    };
    for (let step = 0; step < 24; step++) {
      if (step === 9) {
        cache.freeSequence(live.shift()!);
        live.push(cache.addSequence());
      }
      for (const id of live) cache.append([id], row(seed++), row(seed++));
      check(live, step);
      if (step % 5 === 4) {
        check([...live].reverse(), step);
        check([live[1]], step);
      }
    }
    cache.dispose();
  });

  for (const blockSize of [1, 4, 16]) {
    it(`a decode loop equals the causal prefill (blockSize ${blockSize}, GQA, a prompt then 60 steps)`, () => {
      const [B, L, N, K, H] = [3, 70, 4, 2, 16];
      const q = randomNormal([B, L, N, H], { seed: 1, dtype: 'bfloat16' });
      const k = randomNormal([B, L, K, H], { seed: 2, dtype: 'bfloat16' });
      const v = randomNormal([B, L, K, H], { seed: 3, dtype: 'bfloat16' });
      const prefill = attention(q, k, v, {
        isCausal: true,
        implementation: 'reference',
      }).output.toFloat64Array();
      const numBlocks = B * Math.ceil(L / blockSize) + 4;
      const cache = new KVCache({ numBlocks, blockSize, numKvHeads: K, headDim: H, device: 'cpu' });
      const ids = [cache.addSequence(), cache.addSequence(), cache.addSequence()];
      const prompt = 10;
      cache.append(ids, sliceRows(k, 0, prompt), sliceRows(v, 0, prompt));
      const first = cache
        .attention(sliceRows(q, 0, prompt), ids, { implementation: 'reference' })
        .output.toFloat64Array();
      const row = N * H;
      for (let b = 0; b < B; b++)
        for (let t = 0; t < prompt; t++)
          for (let e = 0; e < row; e++)
            assert.equal(
              first[(b * prompt + t) * row + e],
              prefill[(b * L + t) * row + e],
              `prompt b=${b} t=${t}`,
            );
      for (let t = prompt; t < L; t++) {
        cache.append(ids, sliceRows(k, t, 1), sliceRows(v, t, 1));
        const out = cache
          .attention(sliceRows(q, t, 1), ids, { implementation: 'flash' })
          .output.toFloat64Array();
        for (let b = 0; b < B; b++)
          for (let e = 0; e < row; e++) {
            const want = prefill[(b * L + t) * row + e];
            assert.ok(
              Math.abs(out[b * row + e] - want) < 1e-12,
              `step ${t} b=${b}: ${out[b * row + e]} vs ${want}`,
            );
          }
      }
      assert.equal(cache.sequenceLength(ids[0]), L);
      assert.equal(cache.freeBlocks, 4);
    });
  }

  it('says a host pool too large to hold is out of memory, with the bytes and the shape', () => {
    assert.throws(
      () => new KVCache({ numBlocks: 2 ** 30, blockSize: 1024, numKvHeads: 1, headDim: 8, device: 'cpu' }),
      (e: unknown) =>
        e instanceof OutOfMemoryError &&
        e.device === 'cpu' &&
        e.requestedBytes === 2 ** 30 * 1024 * 8 * 2 &&
        e.message.includes('shape [1073741824, 1024, 1, 8] bfloat16'),
    );
  });

  it('refuses more blocks than an int32 block table can name', () => {
    assert.throws(
      () => new KVCache({ numBlocks: 2 ** 31, blockSize: 1, numKvHeads: 1, headDim: 8, device: 'cpu' }),
      /numBlocks: expected at most 2147483647 \(int32 block tables\), got 2147483648/,
    );
  });

  it("holds a free list of 1.4e8 blocks (a plain array of that length passes V8's limit)", () => {
    const cache = new KVCache({ numBlocks: 1.4e8, blockSize: 1, numKvHeads: 1, headDim: 8, device: 'cpu' });
    assert.equal(cache.freeBlocks, 1.4e8);
    const id = cache.addSequence();
    const row = Tensor.fromArray(new Array(8).fill(1), [1, 1, 1, 8], 'bfloat16');
    cache.append([id], row, row);
    assert.equal(cache.freeBlocks, 1.4e8 - 1);
    assert.deepEqual([...(cache.blockTable([id]).table.data as Int32Array)], [0]);
    cache.dispose();
  });

  it('refuses a disposed key or value before taking any block, naming it', () => {
    const cache = smallFloat16Cache(2);
    const id = cache.addSequence();
    const key = Tensor.zeros([1, 3, 2, 8], 'float16');
    const value = Tensor.zeros([1, 3, 2, 8], 'float16');
    key.dispose();
    assert.throws(() => cache.append([id], key, value), /^InvalidArgumentError: key: expected a live Tensor/);
    assert.equal(cache.freeBlocks, 4);
    assert.equal(cache.sequenceLength(id), 0);
  });

  it('refuses every call after dispose(), naming the cache', () => {
    const cache = new KVCache({ numBlocks: 4, blockSize: 2, numKvHeads: 1, headDim: 8, device: 'cpu' });
    const id = cache.addSequence();
    cache.dispose();
    const row = Tensor.zeros([1, 1, 1, 8], 'bfloat16');
    for (const call of [
      () => cache.addSequence(),
      () => cache.append([id], row, row),
      () => cache.sequenceLength(id),
      () => cache.blockTable([id]),
      () => cache.freeSequence(id),
      () => cache.attention(Tensor.zeros([1, 1, 1, 8], 'bfloat16'), [id]),
      () => cache.freeBlocks,
    ])
      assert.throws(call, /^InvalidArgumentError: cache: expected a live KVCache, got a disposed KVCache$/);
  });

  it("names the query when its dtype or device is not the cache's, and refuses options that are not an object", () => {
    const cache = smallFloat16Cache(1);
    const id = cache.addSequence();
    const row = Tensor.zeros([1, 1, 1, 8], 'float16');
    cache.append([id], row, row);
    assert.throws(
      () => cache.attention(Tensor.zeros([1, 1, 1, 8], 'float32'), [id]),
      /^InvalidArgumentError: query.dtype: expected float16 \(the cache's\), got float32$/,
    );
    for (const options of [5, null, new Map([['isCausal', false]])])
      assert.throws(
        () => cache.attention(row, [id], options as never),
        /^InvalidArgumentError: options: expected an object/,
      );
  });

  it('keeps its causal bottom-right default for an option given as undefined', () => {
    const cache = smallFloat16Cache(1);
    const id = cache.addSequence();
    const rows = randomNormal([1, 5, 1, 8], { seed: 4, dtype: 'float16' });
    cache.append([id], rows, rows);
    const q = randomNormal([1, 2, 1, 8], { seed: 5, dtype: 'float16' });
    const plain = [...cache.attention(q, [id]).output.toFloat64Array()];
    for (const options of [{ isCausal: undefined }, { causalAlignment: undefined, scale: undefined }])
      assert.deepEqual([...cache.attention(q, [id], options).output.toFloat64Array()], plain);
  });

  it('refuses ids with a hole, naming it, before writing anything', () => {
    const cache = smallFloat16Cache(1);
    const a = cache.addSequence();
    const first = Tensor.fromArray([1, 2, 3, 4, 5, 6, 7, 8], [1, 1, 1, 8], 'float16');
    cache.append([a], first, first);
    const b = cache.addSequence();
    const holed = Object.assign(new Array(2), { 0: b });
    const two = randomNormal([2, 1, 1, 8], { seed: 6, dtype: 'float16' });
    assert.throws(
      () => cache.append(holed, two, two),
      /^InvalidArgumentError: ids\[1\]: expected the id of a live sequence \(addSequence\), got undefined$/,
    );
    // Slot 0 (a's first token) is as it was; b holds nothing.
    assert.deepEqual([...cache.keyPool.toFloat64Array().subarray(0, 8)], [1, 2, 3, 4, 5, 6, 7, 8]);
    assert.equal(cache.sequenceLength(b), 0);
    assert.throws(() => cache.blockTable(holed), /^InvalidArgumentError: ids\[1\]/);
    assert.throws(() => cache.append(['0'] as never, two, two), /got the string '0'$/);
  });

  it('returns blocks when a sequence is freed, and refuses a full append without changing anything', () => {
    const cache = new KVCache({ numBlocks: 4, blockSize: 4, numKvHeads: 1, headDim: 8, device: 'cpu' });
    const a = cache.addSequence();
    const b = cache.addSequence();
    const rows = (n: number) => randomNormal([1, n, 1, 8], { seed: n, dtype: 'bfloat16' });
    cache.append([a], rows(12), rows(12));
    assert.equal(cache.freeBlocks, 1);
    assert.throws(
      () => cache.append([b], rows(5), rows(5)),
      (e: unknown) => e instanceof CacheFullError && e.neededBlocks === 2 && e.freeBlocks === 1,
    );
    assert.equal(cache.sequenceLength(b), 0);
    assert.equal(cache.freeBlocks, 1);
    cache.freeSequence(a);
    assert.equal(cache.freeBlocks, 4);
    cache.append([b], rows(5), rows(5));
    assert.equal(cache.sequenceLength(b), 5);
    assert.throws(() => cache.sequenceLength(a), InvalidArgumentError);
  });

  const cache = new KVCache({ numBlocks: 4, blockSize: 4, numKvHeads: 2, headDim: 8, device: 'cpu' });
  const id = cache.addSequence();
  const bad: [string, () => unknown, string][] = [
    [
      'an unknown option',
      () => new KVCache({ numBlocks: 1, blockSize: 1, numKvHeads: 1, headDim: 8, block_size: 16 } as never),
      'options',
    ],
    [
      'a fractional blockSize',
      () => new KVCache({ numBlocks: 1, blockSize: 1.5, numKvHeads: 1, headDim: 8 }),
      'blockSize',
    ],
    [
      'a float32 cache',
      () => new KVCache({ numBlocks: 1, blockSize: 1, numKvHeads: 1, headDim: 8, dtype: 'float32' }),
      'dtype',
    ],
    [
      'a head dim not a multiple of 8',
      () => new KVCache({ numBlocks: 1, blockSize: 1, numKvHeads: 1, headDim: 12 }),
      'headDim',
    ],
    [
      'rows of the wrong K',
      () =>
        cache.append(
          [id],
          randomNormal([1, 1, 1, 8], { seed: 1, dtype: 'bfloat16' }),
          randomNormal([1, 1, 1, 8], { seed: 1, dtype: 'bfloat16' }),
        ),
      'key',
    ],
    [
      'rows of another dtype',
      () =>
        cache.append(
          [id],
          randomNormal([1, 1, 2, 8], { seed: 1, dtype: 'float16' }),
          randomNormal([1, 1, 2, 8], { seed: 1, dtype: 'float16' }),
        ),
      'key.dtype',
    ],
    [
      'an unknown id',
      () =>
        cache.append(
          [99],
          randomNormal([1, 1, 2, 8], { seed: 1, dtype: 'bfloat16' }),
          randomNormal([1, 1, 2, 8], { seed: 1, dtype: 'bfloat16' }),
        ),
      'ids[0]',
    ],
    ['a repeated id', () => cache.blockTable([id, id]), 'ids'],
    [
      'a block table from the caller',
      () =>
        cache.attention(randomNormal([1, 1, 2, 8], { seed: 1, dtype: 'bfloat16' }), [id], {
          blockTable: [[0]],
        }),
      'options.blockTable',
    ],
  ];
  for (const [name, call, argument] of bad) {
    it(`refuses ${name}, naming ${argument}`, () => {
      assert.throws(call, (e: unknown) => e instanceof InvalidArgumentError && e.argument === argument);
    });
  }
});
