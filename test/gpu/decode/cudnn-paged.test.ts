/**
 * The cudnn backend's paged KV cache and packed sequences on the GPU (cuDNN's PAGED_CACHE_LOAD and
 * ragged offsets, src/backends/cuda/cudnn/paged.ts) against the float64 reference of the dense call
 * each stands for, with FlashAttention's accuracy rule: block sizes 16 and 64, shuffled block tables
 * padded with −1, lengths including 0 and 1, GQA and MQA. Device memory is poisoned (0xFF = NaN) so
 * an element cuDNN or attnlab forgets to write fails. Pool slots no token lands in hold 1000 (finite
 * garbage only the lengths can hide); one test puts NaN there instead, to see whether it stays out.
 * Skips, saying why, without a GPU or cuDNN.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { attention } from '../../../src/api/attention.js';
import { KVCache } from '../../../src/api/kv-cache.js';
import { cudnnEnvironment } from '../../../src/backends/cuda/cudnn/backend.js';
import { cudaAvailable } from '../../../src/backends/cuda/runtime/context.js';
import { setAllocationPoison } from '../../../src/backends/cuda/runtime/memory.js';
import type { AttentionOptions, ProblemSize } from '../../../src/backends/problem.js';
import type { FloatDType } from '../../../src/tensor/dtype.js';
import { randomNormal } from '../../../src/tensor/random.js';
import { Tensor } from '../../../src/tensor/tensor.js';
import { assertMatchesOracle } from '../../support/backend-suite.js';
import { pack, pagedCopy, sizes, sliceRows, unpack } from '../../support/kv-layouts.js';

const cuda = cudaAvailable();
const environment = cuda.ok ? cudnnEnvironment() : null;
const skip = !cuda.ok
  ? `no CUDA device: ${cuda.reason}`
  : environment && !environment.ok
    ? `no cuDNN: ${environment.reason}`
    : false;
const seed = Number(process.env.ATTNLAB_TEST_SEED ?? Date.now() % 1_000_000_000);
const decode: AttentionOptions = { isCausal: true, causalAlignment: 'bottom_right' };

interface PagedCase extends ProblemSize {
  name: string;
  Hv?: number;
  kvLengths: number[];
  options?: AttentionOptions;
}

const CASES: PagedCase[] = [
  {
    name: 'GQA 4:1, one token, lengths incl. 0 and 1',
    ...sizes(4, 1, 1000, 8, 2, 128),
    kvLengths: [1000, 1, 0, 517],
    options: decode,
  },
  {
    name: 'MQA N=32, one token, non-causal',
    ...sizes(2, 1, 3000, 32, 1, 64),
    kvLengths: [3000, 1234],
  },
  {
    name: 'MHA, 3 new tokens, causal bottom-right',
    ...sizes(2, 3, 700, 4, 4, 128),
    kvLengths: [700, 300],
    options: decode,
  },
  {
    name: 'GQA 8:1, H=128, Hv=64',
    ...sizes(2, 1, 900, 8, 1, 128),
    Hv: 64,
    kvLengths: [900, 450],
    options: decode,
  },
  {
    name: 'window [64, 0], 2 tokens',
    ...sizes(2, 2, 500, 4, 1, 64),
    kvLengths: [500, 200],
    options: { ...decode, localWindowSize: [64, 0] },
  },
];

function inputs(c: ProblemSize & { Hv?: number }, dtype: FloatDType, salt: number) {
  const q = randomNormal([c.B, c.T, c.N, c.H], { seed: seed + salt, dtype });
  const k = randomNormal([c.B, c.S, c.K, c.H], { seed: seed + salt + 1, dtype });
  const v = randomNormal([c.B, c.S, c.K, c.Hv ?? c.H], { seed: seed + salt + 2, dtype });
  return { q, k, v };
}

/** A shuffled table with the entries past each sequence's blocks set to −1, as serving systems pad. */
function paddedTable(table: number[][], lengths: number[], blockSize: number): number[][] {
  return table.map((row, b) => row.map((block, m) => (m < Math.ceil(lengths[b] / blockSize) ? block : -1)));
}

describe('cudnn paged KV cache and packed sequences', { skip }, () => {
  before(() => {
    console.log(`# cudnn paged suite seed ${seed} (ATTNLAB_TEST_SEED=${seed} replays it)`);
    setAllocationPoison(0xff);
  });
  after(() => setAllocationPoison(null));

  const runPaged = (c: PagedCase, index: number, blockSize: number, dtype: FloatDType, unused: number) => {
    const { q, k, v } = inputs(c, dtype, index * 10);
    const [pk, pv] = [
      pagedCopy(k, blockSize, seed + index, unused),
      pagedCopy(v, blockSize, seed + index, unused),
    ];
    const options: AttentionOptions = { ...c.options, keyValueSeqLengths: c.kvLengths };
    const r = attention(q.to('cuda'), pk.pool.to('cuda'), pv.pool.to('cuda'), {
      ...options,
      blockTable: paddedTable(pk.table, c.kvLengths, blockSize),
      implementation: 'cudnn',
      returnLogSumExp: true,
    });
    assert.equal(r.backend, 'cudnn');
    if (index === 0) console.log(`# ${r.variant}`);
    assertMatchesOracle(r, { q, k, v, options }, dtype, `paged ${blockSize} ${c.name} ${dtype}`);
  };

  CASES.forEach((c, index) => {
    for (const blockSize of [16, 64]) {
      it(`paged (blockSize ${blockSize}): ${c.name}`, () => runPaged(c, index, blockSize, 'bfloat16', 1000));
    }
  });
  it(`paged (blockSize 16), float16: ${CASES[0].name}`, () => runPaged(CASES[0], 0, 16, 'float16', 1000));
  it('paged: NaN in the pool slots past a sequence (in its last page) stays out of its rows', () =>
    runPaged(CASES[0], 0, 64, 'bfloat16', Number.NaN));

  const packedCheck = (
    c: ProblemSize,
    qLengths: number[],
    kvLengths: number[],
    blockSize: number | null,
    salt: number,
  ) => {
    const dtype = 'bfloat16';
    const { q, k, v } = inputs(c, dtype, salt);
    const pq = pack(q, qLengths);
    const options: AttentionOptions = {
      ...decode,
      querySeqOffsets: pq.offsets,
      implementation: 'cudnn',
      returnLogSumExp: true,
    };
    let key: Tensor;
    let value: Tensor;
    if (blockSize) {
      const [pk, pv] = [
        pagedCopy(k, blockSize, seed + salt, 1000),
        pagedCopy(v, blockSize, seed + salt, 1000),
      ];
      [key, value] = [pk.pool, pv.pool];
      Object.assign(options, {
        blockTable: paddedTable(pk.table, kvLengths, blockSize),
        keyValueSeqLengths: kvLengths,
      });
    } else {
      const [pk, pv] = [pack(k, kvLengths), pack(v, kvLengths)];
      [key, value] = [pk.tensor, pv.tensor];
      options.keyValueSeqOffsets = pk.offsets;
    }
    const r = attention(pq.tensor.to('cuda'), key.to('cuda'), value.to('cuda'), options);
    assert.equal(r.backend, 'cudnn');
    assert.deepEqual(r.output.shape, [pq.offsets[c.B], c.N, c.H]);
    const output = Tensor.fromArray(unpack(r.output, pq.offsets, c.T), [c.B, c.T, c.N, c.H], dtype);
    const lse = Tensor.fromArray(
      unpack(r.logSumExp!, pq.offsets, c.T, Number.NEGATIVE_INFINITY),
      [c.B, c.T, c.N],
      'float32',
    );
    r.output.dispose();
    r.logSumExp?.dispose();
    const dense = {
      q,
      k,
      v,
      options: { ...decode, querySeqLengths: qLengths, keyValueSeqLengths: kvLengths },
    };
    assertMatchesOracle(
      { output, logSumExp: lse },
      dense,
      dtype,
      `packed${blockSize ? ` on paged ${blockSize}` : ''}`,
    );
  };

  it('packed query and key/value (varlen prefill and decode mixed, causal bottom-right, GQA 2:1)', () =>
    packedCheck(sizes(4, 17, 300, 4, 2, 64), [1, 5, 0, 17], [100, 5, 3, 300], null, 500));
  it('packed query on a paged cache (blockSize 16; a sequence with no keys, one with no new tokens)', () =>
    packedCheck(sizes(4, 3, 200, 8, 2, 128), [2, 0, 3, 1], [200, 17, 0, 1], 16, 600));

  it('a 48-step decode loop through KVCache on cudnn equals one causal prefill over the final sequences', () => {
    const [B, L, N, K, H] = [2, 48, 8, 2, 64];
    const dtype = 'bfloat16';
    const q = randomNormal([B, L, N, H], { seed: seed + 900, dtype });
    const k = randomNormal([B, L, K, H], { seed: seed + 901, dtype });
    const v = randomNormal([B, L, K, H], { seed: seed + 902, dtype });
    const cache = new KVCache({
      numBlocks: 2 * Math.ceil(L / 16) + 1,
      blockSize: 16,
      numKvHeads: K,
      headDim: H,
    });
    const ids = [cache.addSequence(), cache.addSequence()];
    // Step t appends token t of each sequence and reads the output row of query t.
    const rows = Array.from({ length: L }, (_, t) => {
      const [kt, vt, qt] = [k, v, q].map((x) => sliceRows(x, t, 1).to('cuda'));
      cache.append(ids, kt, vt);
      const r = cache.attention(qt, ids, { implementation: 'cudnn' });
      assert.equal(r.backend, 'cudnn');
      const host = r.output.toHost().toFloat64Array();
      for (const x of [kt, vt, qt, r.output]) x.dispose();
      return host;
    });
    const width = N * H;
    const out = new Float64Array(B * L * width);
    rows.forEach((host, t) => {
      for (let b = 0; b < B; b++) out.set(host.subarray(b * width, (b + 1) * width), (b * L + t) * width);
    });
    cache.dispose();
    const output = Tensor.fromArray(out, [B, L, N, H], dtype);
    const logSumExp = attention(q, k, v, {
      isCausal: true,
      implementation: 'reference',
      returnLogSumExp: true,
    }).logSumExp;
    assertMatchesOracle(
      { output, logSumExp },
      { q, k, v, options: { isCausal: true } },
      dtype,
      'cudnn decode loop',
    );
  });
});
