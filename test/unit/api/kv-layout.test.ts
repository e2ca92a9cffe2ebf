/**
 * Paged KV caches and packed sequences on the CPU backends: each equals the dense call it stands for
 * (built here by hand, independently of the gather in dense-view.ts), and bad tables and offsets are
 * refused naming the argument.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { attention } from '../../../src/api/attention.js';
import { InvalidArgumentError, UnsupportedError } from '../../../src/errors.js';
import { randomNormal } from '../../../src/tensor/random.js';
import { Tensor } from '../../../src/tensor/tensor.js';
import { pack, pagedCopy } from '../../support/kv-layouts.js';

const IMPLEMENTATIONS = ['reference', 'flash'] as const;

describe('paged KV cache', () => {
  for (const blockSize of [1, 4, 16]) {
    it(`equals the dense call (blockSize ${blockSize}, GQA, lengths 0, 1 and ragged)`, () => {
      const [B, T, S, N, K, H] = [4, 3, 37, 4, 2, 16];
      const q = randomNormal([B, T, N, H], { seed: 1, dtype: 'bfloat16' });
      const k = randomNormal([B, S, K, H], { seed: 2, dtype: 'bfloat16' });
      const v = randomNormal([B, S, K, H], { seed: 3, dtype: 'bfloat16' });
      const lengths = [37, 0, 1, 20];
      const pk = pagedCopy(k, blockSize, 4);
      const pv = pagedCopy(v, blockSize, 4);
      for (const implementation of IMPLEMENTATIONS) {
        for (const isCausal of [false, true]) {
          const common = {
            implementation,
            isCausal,
            causalAlignment: 'bottom_right' as const,
            keyValueSeqLengths: lengths,
            returnLogSumExp: true,
          };
          const dense = attention(q, k, v, common);
          const paged = attention(q, pk.pool, pv.pool, { ...common, blockTable: pk.table });
          assert.equal(paged.backend, implementation);
          assert.deepEqual(paged.output.shape, [B, T, N, H]);
          assert.deepEqual([...paged.output.toFloat64Array()], [...dense.output.toFloat64Array()]);
          assert.deepEqual([...paged.logSumExp!.toFloat64Array()], [...dense.logSumExp!.toFloat64Array()]);
        }
      }
    });
  }

  it('gathers only the blocks the longest sequence holds: a table 2^22 blocks wide, a bias of its full width', () => {
    // Tables are sized for the longest context (vLLM): gathered whole, this one asked 2^33 elements (32 GiB)
    // of host memory for 17 cached tokens and failed with OutOfMemoryError. The bias spans the table's full S.
    const [B, S, N, K, H, blockSize, wide] = [2, 11, 4, 2, 128, 4, 2 ** 22];
    const q = randomNormal([B, 2, N, H], { seed: 8 });
    const k = randomNormal([B, S, K, H], { seed: 9 });
    const v = randomNormal([B, S, K, H], { seed: 10 });
    const pk = pagedCopy(k, blockSize, 11);
    const pv = pagedCopy(v, blockSize, 11);
    const table = new Int32Array(B * wide);
    for (let b = 0; b < B; b++) table.set(pk.table[b], b * wide);
    const biasValues = Array.from({ length: 2 * S }, (_, i) => (i % 5) - 2);
    const lengths = [S, 6];
    for (const implementation of IMPLEMENTATIONS) {
      const common = {
        implementation,
        isCausal: true,
        causalAlignment: 'bottom_right' as const,
        keyValueSeqLengths: lengths,
        returnLogSumExp: true,
      };
      const dense = attention(q, k, v, { ...common, bias: Tensor.fromArray(biasValues, [1, 1, 2, S]) });
      const wideBias = new Float64Array(2 * wide * blockSize);
      for (let i = 0; i < 2; i++) wideBias.set(biasValues.slice(i * S, (i + 1) * S), i * wide * blockSize);
      const paged = attention(q, pk.pool, pv.pool, {
        ...common,
        blockTable: Tensor.fromRaw(table, [B, wide], 'int32'),
        bias: Tensor.fromArray(wideBias, [1, 1, 2, wide * blockSize]),
      });
      assert.deepEqual([...paged.output.toFloat64Array()], [...dense.output.toFloat64Array()]);
      assert.deepEqual([...paged.logSumExp!.toFloat64Array()], [...dense.logSumExp!.toFloat64Array()]);
    }
  });

  it('takes the table as an int32 Tensor, or rows of Int32Arrays or tensors, and ignores entries past each length', () => {
    const q = randomNormal([2, 1, 2, 8], { seed: 5 });
    const k = randomNormal([2, 8, 1, 8], { seed: 6 });
    const v = randomNormal([2, 8, 1, 8], { seed: 7 });
    const pk = pagedCopy(k, 4, 8);
    const pv = pagedCopy(v, 4, 8);
    const table = pk.table.map((row) => [...row]);
    table[1][1] = -1; // sequence 1 holds 3 tokens: only its first block is read
    const tensorTable = Tensor.fromArray(table.flat(), [2, pk.M], 'int32');
    const options = { keyValueSeqLengths: [8, 3] };
    const dense = attention(q, k, v, options).output.toFloat64Array();
    const paged = attention(q, pk.pool, pv.pool, { ...options, blockTable: tensorTable });
    assert.deepEqual([...paged.output.toFloat64Array()], [...dense]);
    // Rows as Int32Arrays or int32 tensors: row 0 a typed array was refused ("expected -1 entries as row 0").
    for (const blockTable of [
      table.map((row) => Int32Array.from(row)),
      table.map((row) => Tensor.fromArray(row, [row.length], 'int32')),
    ]) {
      const rows = attention(q, pk.pool, pv.pool, { ...options, blockTable: blockTable as never });
      assert.deepEqual([...rows.output.toFloat64Array()], [...dense]);
    }
    assert.throws(
      () => attention(q, pk.pool, pv.pool, { ...options, blockTable: [Int32Array.from(table[0])] as never }),
      /^InvalidArgumentError: blockTable: expected B=2 rows/,
    );
    assert.throws(
      () =>
        attention(q, pk.pool, pv.pool, {
          ...options,
          blockTable: Object.assign(new Array(2), { 0: table[0] }) as never,
        }),
      /^InvalidArgumentError: blockTable\[1\]: expected block indices \(one row per sequence\), got undefined$/,
    );
  });

  it('checks again what a repeated table has not had checked: grown lengths, a changed entry, a smaller pool', () => {
    const q1 = randomNormal([2, 1, 2, 8], { seed: 11 });
    const pool5 = randomNormal([5, 4, 1, 8], { seed: 12 });
    // Row 1's second block is not allocated yet (-1): fine while sequence 1 holds ≤ 4 tokens.
    const table = Tensor.fromArray([0, 1, 2, -1], [2, 2], 'int32');
    const step = (lengths: number[], t = table, pool = pool5) =>
      attention(q1, pool, pool, { blockTable: t, keyValueSeqLengths: lengths });
    step([5, 3]);
    step([6, 4]); // the same table, lengths inside the blocks already checked
    assert.throws(
      () => step([6, 5]), // sequence 1 now reads its second block
      (e: unknown) => e instanceof InvalidArgumentError && e.argument === 'blockTable[1][1]',
    );
    step([6, 4]);
    const changed = Tensor.fromArray([0, 7, 2, -1], [2, 2], 'int32');
    assert.throws(
      () => step([6, 4], changed),
      (e: unknown) => e instanceof InvalidArgumentError && e.argument === 'blockTable[0][1]',
    );
    const pool2 = randomNormal([2, 4, 1, 8], { seed: 13 });
    assert.throws(
      () => step([6, 4], table, pool2), // same entries, but block 2 is past a 2-block pool
      (e: unknown) => e instanceof InvalidArgumentError && e.argument === 'blockTable[1][0]',
    );
  });

  const q = randomNormal([2, 1, 2, 8], { seed: 9 });
  const pool = randomNormal([5, 4, 1, 8], { seed: 10 });
  const bad: [string, Record<string, unknown>, string][] = [
    [
      'a block index past the pool',
      {
        blockTable: [
          [0, 5],
          [1, 2],
        ],
        keyValueSeqLengths: [8, 8],
      },
      'blockTable[0][1]',
    ],
    [
      'a negative block index in use',
      {
        blockTable: [
          [0, 1],
          [-1, 2],
        ],
        keyValueSeqLengths: [8, 1],
      },
      'blockTable[1][0]',
    ],
    [
      'a length past the table',
      {
        blockTable: [
          [0, 1],
          [2, 3],
        ],
        keyValueSeqLengths: [9, 1],
      },
      'keyValueSeqLengths[0]',
    ],
    [
      'no lengths',
      {
        blockTable: [
          [0, 1],
          [2, 3],
        ],
      },
      'keyValueSeqLengths',
    ],
    ['a table of the wrong batch', { blockTable: [[0, 1]], keyValueSeqLengths: [1, 1] }, 'blockTable'],
    [
      'lengths of another batch (one too many)',
      {
        blockTable: [
          [0, 1],
          [2, 3],
        ],
        keyValueSeqLengths: [1, 1, 1],
      },
      'keyValueSeqLengths',
    ],
    [
      'lengths of another batch (one too few)',
      {
        blockTable: [
          [0, 1],
          [2, 3],
        ],
        keyValueSeqLengths: [1],
      },
      'keyValueSeqLengths',
    ],
    [
      'a number for the lengths',
      {
        blockTable: [
          [0, 1],
          [2, 3],
        ],
        keyValueSeqLengths: 4,
      },
      'keyValueSeqLengths',
    ],
    ['ragged rows', { blockTable: [[0, 1], [2]], keyValueSeqLengths: [1, 1] }, 'blockTable[1]'],
    [
      'a float table entry',
      {
        blockTable: [
          [0, 1.5],
          [2, 3],
        ],
        keyValueSeqLengths: [1, 1],
      },
      'blockTable[0][1]',
    ],
    [
      'a float32 table tensor',
      { blockTable: Tensor.zeros([2, 2]), keyValueSeqLengths: [1, 1] },
      'blockTable.dtype',
    ],
    ['a string table', { blockTable: 'abc', keyValueSeqLengths: [1, 1] }, 'blockTable'],
    [
      'key offsets with a paged cache',
      { blockTable: [[0], [1]], keyValueSeqLengths: [1, 1], keyValueSeqOffsets: [0, 1, 2] },
      'keyValueSeqOffsets',
    ],
  ];
  for (const [name, options, argument] of bad) {
    it(`refuses ${name}, naming ${argument}`, () => {
      assert.throws(
        () => attention(q, pool, pool, options),
        (e: unknown) => e instanceof InvalidArgumentError && e.argument === argument,
      );
    });
  }
});

describe('packed sequences', () => {
  it('equal the padded dense call (query and key/value packed, causal, GQA, a window)', () => {
    const [B, N, K, H] = [3, 4, 1, 8];
    const qLengths = [3, 0, 5];
    const kvLengths = [7, 1, 5];
    const [T, S] = [Math.max(...qLengths), Math.max(...kvLengths)];
    const q = randomNormal([B, T, N, H], { seed: 11, dtype: 'float16' });
    const k = randomNormal([B, S, K, H], { seed: 12, dtype: 'float16' });
    const v = randomNormal([B, S, K, H], { seed: 13, dtype: 'float16' });
    const pq = pack(q, qLengths);
    const pk = pack(k, kvLengths);
    const pv = pack(v, kvLengths);
    for (const implementation of IMPLEMENTATIONS) {
      const common = {
        implementation,
        isCausal: true,
        causalAlignment: 'bottom_right' as const,
        localWindowSize: [3, 0] as [number, number],
        returnLogSumExp: true,
      };
      const dense = attention(q, k, v, {
        ...common,
        querySeqLengths: qLengths,
        keyValueSeqLengths: kvLengths,
      });
      const packed = attention(pq.tensor, pk.tensor, pv.tensor, {
        ...common,
        querySeqOffsets: pq.offsets,
        keyValueSeqOffsets: pk.offsets,
      });
      assert.deepEqual(packed.output.shape, [8, N, H]);
      assert.deepEqual(packed.logSumExp!.shape, [8, N]);
      const want = pack(dense.output, qLengths).tensor.toFloat64Array();
      assert.deepEqual([...packed.output.toFloat64Array()], [...want]);
      const wantLse = pack(dense.logSumExp!.reshape([B, T, N, 1]), qLengths).tensor.toFloat64Array();
      assert.deepEqual([...packed.logSumExp!.toFloat64Array()], [...wantLse]);
    }
  });

  it('take a packed query over a paged cache', () => {
    const [B, N, H] = [2, 2, 8];
    const qLengths = [2, 1];
    const kvLengths = [5, 3];
    const q = randomNormal([B, 2, N, H], { seed: 14 });
    const k = randomNormal([B, 5, 1, H], { seed: 15 });
    const v = randomNormal([B, 5, 1, H], { seed: 16 });
    const pq = pack(q, qLengths);
    const pk = pagedCopy(k, 2, 17);
    const pv = pagedCopy(v, 2, 17);
    const common = { isCausal: true, causalAlignment: 'bottom_right' as const };
    const dense = attention(q, k, v, { ...common, querySeqLengths: qLengths, keyValueSeqLengths: kvLengths });
    const mixed = attention(pq.tensor, pk.pool, pv.pool, {
      ...common,
      querySeqOffsets: pq.offsets,
      blockTable: pk.table,
      keyValueSeqLengths: kvLengths,
    });
    assert.deepEqual(
      [...mixed.output.toFloat64Array()],
      [...pack(dense.output, qLengths).tensor.toFloat64Array()],
    );
  });

  const q = randomNormal([4, 2, 8], { seed: 18 });
  const kv = randomNormal([5, 1, 8], { seed: 19 });
  const bad: [string, Record<string, unknown>, string][] = [
    [
      'decreasing offsets',
      { querySeqOffsets: [0, 3, 2, 4], keyValueSeqOffsets: [0, 1, 2, 5] },
      'querySeqOffsets[2]',
    ],
    [
      'offsets not ending at the total',
      { querySeqOffsets: [0, 1, 2, 3], keyValueSeqOffsets: [0, 1, 2, 5] },
      'querySeqOffsets[3]',
    ],
    [
      'offsets not starting at 0',
      { querySeqOffsets: [1, 2, 3, 4], keyValueSeqOffsets: [0, 1, 2, 5] },
      'querySeqOffsets[0]',
    ],
    [
      'offsets of another batch',
      { querySeqOffsets: [0, 2, 4], keyValueSeqOffsets: [0, 1, 2, 5] },
      'keyValueSeqOffsets',
    ],
    [
      'lengths beside offsets',
      { querySeqOffsets: [0, 4], keyValueSeqOffsets: [0, 5], querySeqLengths: [4] },
      'querySeqLengths',
    ],
    [
      'a non-integer offset',
      { querySeqOffsets: [0, 2.5, 4], keyValueSeqOffsets: [0, 1, 5] },
      'querySeqOffsets[1]',
    ],
  ];
  it('say how many key offsets came when they describe another batch', () => {
    assert.throws(
      () => attention(q, kv, kv, { querySeqOffsets: [0, 2, 4], keyValueSeqOffsets: [0, 1, 2, 5] }),
      (e: unknown) =>
        e instanceof InvalidArgumentError &&
        e.argument === 'keyValueSeqOffsets' &&
        /expected B\+1=3 offsets .*, got 4 \(B=3\)$/.test(e.message),
    );
  });
  for (const [name, options, argument] of bad) {
    it(`refuse ${name}, naming ${argument}`, () => {
      assert.throws(
        () => attention(q, kv, kv, options),
        (e: unknown) => e instanceof InvalidArgumentError && e.argument === argument,
      );
    });
  }
});

describe('lengths and offsets as int32 Tensors', () => {
  const ints = (values: number[]) => Tensor.fromArray(values, [values.length], 'int32');
  const same = (a: Tensor, b: Tensor) => assert.deepEqual([...a.toFloat64Array()], [...b.toFloat64Array()]);

  it('equal the same values given as arrays: dense lengths, packed offsets, a paged cache', () => {
    const q = randomNormal([2, 3, 4, 8], { seed: 40 });
    const k = randomNormal([2, 5, 2, 8], { seed: 41 });
    same(
      attention(q, k, k, { querySeqLengths: ints([2, 3]), keyValueSeqLengths: ints([4, 1]) }).output,
      attention(q, k, k, { querySeqLengths: [2, 3], keyValueSeqLengths: [4, 1] }).output,
    );
    const qp = randomNormal([3, 4, 8], { seed: 42 });
    const kp = randomNormal([5, 2, 8], { seed: 43 });
    same(
      attention(qp, kp, kp, { querySeqOffsets: ints([0, 1, 3]), keyValueSeqOffsets: ints([0, 2, 5]) }).output,
      attention(qp, kp, kp, { querySeqOffsets: [0, 1, 3], keyValueSeqOffsets: [0, 2, 5] }).output,
    );
    const pool = randomNormal([4, 4, 2, 8], { seed: 44 });
    const q1 = randomNormal([2, 1, 4, 8], { seed: 45 });
    const blockTable = [
      [0, 1],
      [3, 2],
    ];
    same(
      attention(q1, pool, pool, { blockTable, keyValueSeqLengths: ints([5, 3]) }).output,
      attention(q1, pool, pool, { blockTable, keyValueSeqLengths: [5, 3] }).output,
    );
  });

  const disposed = ints([0, 5]);
  disposed.dispose();
  const q = randomNormal([1, 1, 2, 8], { seed: 46 });
  const k = randomNormal([1, 5, 1, 8], { seed: 47 });
  const packedKv = randomNormal([5, 1, 8], { seed: 49 });
  const bad: [string, () => unknown, string][] = [
    [
      'float32 lengths',
      () => attention(q, k, k, { keyValueSeqLengths: Tensor.zeros([1]) }),
      'keyValueSeqLengths.dtype',
    ],
    [
      'lengths of rank 2',
      () => attention(q, k, k, { querySeqLengths: Tensor.fromArray([1], [1, 1], 'int32') }),
      'querySeqLengths',
    ],
    [
      'disposed offsets',
      () =>
        attention(randomNormal([1, 2, 8], { seed: 48 }), packedKv, packedKv, {
          querySeqOffsets: [0, 1],
          keyValueSeqOffsets: disposed,
        }),
      'keyValueSeqOffsets',
    ],
    [
      'lengths of another batch',
      () => attention(q, k, k, { keyValueSeqLengths: ints([1, 2]) }),
      'keyValueSeqLengths',
    ],
  ];
  for (const [name, call, argument] of bad) {
    it(`refuse ${name}, naming ${argument}`, () => {
      assert.throws(call, (e: unknown) => e instanceof InvalidArgumentError && e.argument === argument);
    });
  }
});

describe('layouts and the registry', () => {
  it('a backend that does not declare a layout refuses it with the reason', async () => {
    const { layoutSupport } = await import('../../../src/backends/registry.js');
    const q = randomNormal([1, 1, 1, 8], { seed: 20 });
    const pool = randomNormal([2, 4, 1, 8], { seed: 21 });
    const options = { blockTable: [[0, 1]], keyValueSeqLengths: [5] };
    const { validateAttention } = await import('../../../src/api/validate.js');
    const problem = validateAttention(q, pool, pool, options);
    const support = layoutSupport(
      {
        name: 'naive',
        device: 'cuda',
        plan: () => ({ ok: true, plan: null }),
        run: () => {
          throw new UnsupportedError('x', 'y');
        },
      },
      problem,
    );
    assert.equal(support.ok, false);
    assert.match(support.ok ? '' : support.reason, /paged KV cache/);
  });
});
