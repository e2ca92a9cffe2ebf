/** The TMA decode kernel's table (src/backends/cuda/flash/decode-tma.ts): where decode.ts picks it, its maps, its refusals. */
import assert from 'node:assert/strict';
import { afterEach, describe, it } from 'node:test';
import { chooseSplits, splitVariant } from '../../src/backends/cuda/flash/decode.js';
import { headsVariant } from '../../src/backends/cuda/flash/decode-heads.js';
import { decodeTuning } from '../../src/backends/cuda/flash/decode-splits.js';
import {
  tmaMapSpecs,
  tmaPreferred,
  tmaSharedBytes,
  tmaSupport,
  tmaThreads,
  tmaVariant,
  tmaVariantKey,
} from '../../src/backends/cuda/flash/decode-tma.js';
import type { AttentionProblem } from '../../src/backends/problem.js';

/** The fields the tables read; a host problem (no device pointers to check). blockSize 0: dense. */
const problem = (o: {
  B?: number;
  S?: number;
  T?: number;
  N?: number;
  K?: number;
  H?: number;
  blockSize?: number;
}) => {
  const { B = 64, S = 16384, T = 1, N = 32, K = 1, H = 128, blockSize = 16 } = o;
  return {
    B,
    T,
    N,
    K,
    H,
    Hv: H,
    S,
    dtype: 'bfloat16',
    device: 'cpu',
    paged: blockSize
      ? { blockSize, numBlocks: (B * S) / blockSize + 3, maxBlocksPerSeq: S / blockSize }
      : null,
    packed: null,
    keyValueSeqLengths: null,
  } as unknown as AttentionProblem;
};
const LIMIT = 232448; // the H200's opt-in shared memory per block
const kind = (p: AttentionProblem) => splitVariant(p, 'sm_90a', LIMIT).kind ?? 'rows';

describe('TMA decode kernel table', () => {
  afterEach(() => {
    delete decodeTuning.kernel;
  });
  it('replaces the heads kernel where that one serves MQA rows (one kv head, two row tiles), as measured', () => {
    for (const blockSize of [0, 16, 64])
      assert.equal(kind(problem({ blockSize })), 'tma', `block ${blockSize}`);
    assert.equal(kind(problem({ N: 16, T: 2 })), 'tma', '2 tokens of N=16: 32 rows');
    assert.equal(kind(problem({ K: 8 })), 'heads', 'K=8: 4 heads a block, bytes-bound, the heads kernel');
    assert.equal(kind(problem({ N: 16 })), 'heads', 'N=16 K=1: one row tile (not measured)');
    assert.equal(kind(problem({ B: 1, S: 2048 })), 'rows', 'a short cache stays on the row-tile kernel');
    assert.equal(kind(problem({ blockSize: 12 })), 'heads', 'block 12: no whole boxes');
  });
  it('gives way to a forced kernel, and is forced wherever it can run', () => {
    decodeTuning.kernel = 'heads';
    assert.equal(kind(problem({})), 'heads');
    decodeTuning.kernel = 'rows';
    assert.equal(kind(problem({})), 'rows');
    decodeTuning.kernel = 'tma';
    assert.equal(kind(problem({ B: 1, S: 2048, N: 8, K: 2 })), 'tma', '4 rows per kv head, short cache');
    assert.equal(kind(problem({ K: 8, N: 32, H: 64 })), 'heads', 'H=64: the normal choice');
  });
  it('reads the MQA case as the harness measured it: 288 threads, 197,760 B, the heads kernel split count', () => {
    const p = problem({});
    const v = tmaVariant(p, 'sm_90a');
    assert.equal(tmaThreads(v), 288, '8 consumer warps and one producer');
    assert.equal(tmaSharedBytes(v), 197_760);
    assert.equal(tmaVariantKey(v), 'flash-decode-tma.sm_90a.bf16.d128.1x2x4.k128s3f');
    assert.equal(
      chooseSplits(p, v, 132, LIMIT),
      chooseSplits(p, headsVariant(p, 'sm_90a', LIMIT), 132, LIMIT),
    );
    assert.equal(tmaPreferred(p, headsVariant(p, 'sm_90a', LIMIT), 'sm_90a'), true);
  });
  it('maps a dense cache (H, S, K, B) and a pool (H, blockSize, K, blocks) with a page a box', () => {
    const dense = problem({ blockSize: 0, K: 2, N: 32 });
    const [k, v] = tmaMapSpecs(dense, tmaVariant(dense, 'sm_90a'), 4096n, 8192n);
    assert.deepEqual(
      [k.address, v.address, k.dims, k.byteStrides, k.box],
      [4096n, 8192n, [128, 16384, 2, 64], [512, 256, 16384 * 512], [64, 128, 1, 1]],
    );
    for (const [blockSize, box] of [
      [16, 16],
      [64, 64],
      [256, 128], // a page holds two tiles: a box is a tile
    ]) {
      const p = problem({ blockSize });
      const [pk] = tmaMapSpecs(p, tmaVariant(p, 'sm_90a'), 0n, 0n);
      assert.deepEqual(
        [pk.dims, pk.byteStrides, pk.box],
        [
          [128, blockSize, 1, (64 * 16384) / blockSize + 3],
          [256, 256, blockSize * 256],
          [64, box, 1, 1],
        ],
      );
      assert.equal(pk.l2Promotion, 'none', 'decode streams each byte once: no L2 promotion');
    }
  });
  for (const [why, p, arch] of [
    ['sm_80', problem({}), 'sm_80'],
    ['H=64', problem({ H: 64 }), 'sm_90a'],
    ['64 rows per kv head', problem({ N: 64 }), 'sm_90a'],
    ['block 4 (below the 8-row swizzle atom)', problem({ blockSize: 4 }), 'sm_90a'],
    ['block 48 (not a power of two)', problem({ blockSize: 48 }), 'sm_90a'],
    [
      'packed keys',
      {
        ...problem({ blockSize: 0 }),
        packed: { keyValueSeqOffsets: Int32Array.of(0, 5) },
      } as AttentionProblem,
      'sm_90a',
    ],
  ] as const) {
    it(`refuses ${why}`, () => assert.equal(tmaSupport(p, arch).ok, false));
  }
});
