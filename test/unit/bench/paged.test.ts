/**
 * `attnlab bench --block-size`: a dense cache as pools behind a shuffled table (src/bench/paged-inputs.ts), the
 * cases the sweep makes of it, and rows measured on it (checked against the dense inputs' float64 oracle).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { measureAttnlabCase } from '../../../src/bench/measure.js';
import { pagedFromDense } from '../../../src/bench/paged-inputs.js';
import { makeResults } from '../../../src/bench/results.js';
import { expandSweep } from '../../../src/bench/sweep.js';
import { specFrom } from '../../../src/cli/bench.js';
import { InvalidArgumentError } from '../../../src/errors.js';
import { parseResults } from '../../../src/results/validate.js';
import { randomNormal } from '../../../src/tensor/random.js';

describe('pagedFromDense', () => {
  it('holds each sequence block m in pool block table[b][m], zeros past S, and the table is a permutation', () => {
    const [B, S, K, H, bs] = [3, 10, 2, 4, 4];
    const key = randomNormal([B, S, K, H], { seed: 1 });
    const value = randomNormal([B, S, K, 6], { seed: 2 });
    const p = pagedFromDense(key, value, bs, 7);
    const M = Math.ceil(S / bs);
    assert.deepEqual(p.keyPool.shape, [B * M, bs, K, H]);
    assert.deepEqual(p.valuePool.shape, [B * M, bs, K, 6]);
    assert.deepEqual(p.blockTable.shape, [B, M]);
    assert.deepEqual(p.lengths, [S, S, S]);
    const table = [...(p.blockTable.data as Int32Array)];
    assert.deepEqual(
      [...table].sort((a, b) => a - b),
      [...Array(B * M).keys()],
    );
    assert.notDeepEqual(table, [...Array(B * M).keys()], 'shuffled, not in pool order');
    for (const [dense, pool, X] of [
      [key, p.keyPool, H],
      [value, p.valuePool, 6],
    ] as const) {
      const d = dense.toFloat64Array();
      const q = pool.toFloat64Array();
      const row = K * X;
      for (let b = 0; b < B; b++)
        for (let t = 0; t < M * bs; t++) {
          const at = (table[b * M + Math.floor(t / bs)] * bs + (t % bs)) * row;
          const want = t < S ? [...d.subarray((b * S + t) * row, (b * S + t + 1) * row)] : Array(row).fill(0);
          assert.deepEqual([...q.subarray(at, at + row)], want, `b=${b} t=${t}`);
        }
    }
    assert.deepEqual(pagedFromDense(key, value, bs, 7).blockTable.data, p.blockTable.data, 'seeded');
  });
});

describe('bench on a paged cache', () => {
  const c = { B: 2, T: 1, S: 40, N: 4, K: 1, H: 16, dtype: 'float32' as const, causal: false };
  const quick = { budgetMs: 5, warmup: 1, minRepeats: 3, sweep: 'unit' };

  it('the sweep makes one case per block size, and --block-size reaches it', () => {
    const flags = {
      batch: '2',
      seq: '1',
      kvSeq: '40',
      heads: '4',
      kvHeads: '1',
      headDim: '16',
      dtype: 'f32',
      causal: 'false',
      pass: 'forward',
      impl: 'flash,reference',
      blockSize: '16,64',
      warmup: '1',
      repeats: '3',
      budgetMs: '5',
      settleMs: '0',
      seed: '0',
    };
    const { cases } = expandSweep(specFrom(flags));
    assert.deepEqual(
      cases.map((x) => `${x.impl} ${x.blockSize}`),
      ['flash 16', 'reference 16', 'flash 64', 'reference 64'],
    );
    assert.equal(expandSweep(specFrom({ ...flags, blockSize: undefined })).cases[0].blockSize, undefined);
    assert.throws(
      () => specFrom({ ...flags, blockSize: '0' }),
      (e: unknown) => e instanceof InvalidArgumentError && e.argument === '--block-size',
    );
  });

  for (const impl of ['flash', 'reference'] as const)
    it(`${impl}: times the pools, equals the dense oracle, and the row says its block size`, () => {
      const row = measureAttnlabCase({ ...c, impl, blockSize: 16 }, quick);
      assert.equal(row.status, 'ok', row.reason);
      assert.equal(row.blockSize, 16);
      assert.equal(row.label, `attnlab ${impl} f32 paged 16`);
      assert.ok(
        row.maxError !== undefined && row.maxError !== null && row.maxError < 1e-6,
        String(row.maxError),
      );
      assert.ok((row.bandwidthGBs ?? 0) > 0);
      const file = makeResults('bench', { rows: [row] });
      assert.equal(parseResults(JSON.parse(JSON.stringify(file)), 'paged').rows[0].blockSize, 16);
    });

  it('refuses a backward pass on a paged cache as an unsupported row, naming why', () => {
    const row = measureAttnlabCase({ ...c, impl: 'flash', blockSize: 16 }, { ...quick, pass: 'backward' });
    assert.equal(row.status, 'unsupported');
    assert.match(row.reason ?? '', /a paged cache in a backward pass/);
  });

  it('a results file with a block size of 0 is refused', () => {
    const row = measureAttnlabCase({ ...c, impl: 'reference', blockSize: 16 }, quick);
    const file = JSON.parse(JSON.stringify(makeResults('bench', { rows: [{ ...row, blockSize: 0 }] })));
    assert.throws(() => parseResults(file, 'bad'), /blockSize/);
  });
});
