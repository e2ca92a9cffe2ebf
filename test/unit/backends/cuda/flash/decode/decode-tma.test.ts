/** The TMA decode kernel's table (src/backends/cuda/flash/decode/decode-tma.ts): where decode.ts picks it, its maps, its refusals. */
import assert from 'node:assert/strict';
import { afterEach, describe, it } from 'node:test';
import { chooseSplits, splitVariant } from '../../../../../../src/backends/cuda/flash/decode/decode.js';
import { headsVariant } from '../../../../../../src/backends/cuda/flash/decode/decode-heads.js';
import { decodeTuning } from '../../../../../../src/backends/cuda/flash/decode/decode-splits.js';
import {
  DEPENDENT_MAX_BYTES,
  ROW_GROUP_MAX_KEYS,
  tmaDefines,
  tmaDependentLaunches,
  tmaMapSpecs,
  tmaPreferred,
  tmaRowGroups,
  tmaSharedBytes,
  tmaSupport,
  tmaThreads,
  tmaVariant,
  tmaVariantKey,
} from '../../../../../../src/backends/cuda/flash/decode/decode-tma.js';
import type { AttentionProblem } from '../../../../../../src/backends/problem.js';

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
const SMS = 132;
const split = (p: AttentionProblem) => splitVariant(p, 'sm_90a', LIMIT, SMS);
const kind = (p: AttentionProblem) => split(p).kind ?? 'rows';
/** The TMA variant decode.ts picks for `p`. */
const picked = (p: AttentionProblem) => {
  const v = split(p);
  assert.equal(v.kind, 'tma');
  return v as ReturnType<typeof tmaVariant>;
};

describe('TMA decode kernel table', () => {
  afterEach(() => {
    delete decodeTuning.kernel;
    delete decodeTuning.rowGroups;
    delete decodeTuning.rowTiles;
    delete decodeTuning.boxGroup;
    delete decodeTuning.multicast;
  });
  it('replaces the heads kernel wherever it can run, and the row-tile kernel on short MQA caches, as measured', () => {
    for (const blockSize of [0, 16, 64]) {
      assert.equal(kind(problem({ blockSize })), 'tma', `block ${blockSize}`);
      assert.equal(kind(problem({ K: 8, blockSize })), 'tma', `K=8 (4 rows a kv head), block ${blockSize}`);
    }
    assert.equal(kind(problem({ N: 16, T: 2 })), 'tma', '2 tokens of N=16: 32 rows');
    assert.equal(kind(problem({ N: 16 })), 'tma', 'N=16 K=1: one row tile');
    assert.equal(kind(problem({ blockSize: 12 })), 'heads', 'block 12: no whole boxes');
    assert.equal(kind(problem({ K: 8, H: 64 })), 'heads', 'H=64: the TMA kernel takes 128');
    for (const blockSize of [0, 16, 64]) {
      const short = picked(problem({ B: 1, S: 32768, blockSize }));
      assert.equal(short.rowGroups, 2, `B=1 S=32k MQA, block ${blockSize}: row groups`);
      assert.equal(kind(problem({ B: 1, S: 16384, blockSize })), 'rows', 'B=1 S=16k: the host decides');
      assert.equal(
        kind(problem({ B: 1, S: 32768, K: 8, blockSize })),
        'rows',
        `B=1 S=32k K=8, block ${blockSize}`,
      );
    }
    assert.equal(kind(problem({ B: 2, S: 16384 })), 'tma', '32k tokens in two sequences');
    assert.equal(kind(problem({ B: 1, S: 32768, N: 16 })), 'rows', '16 rows a kv head on a short cache');
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
    assert.equal(tmaVariantKey(v), 'flash-decode-tma.sm_90a.bf16.d128.1x2x4.k128s3f.g8');
    assert.equal(
      chooseSplits(p, v, SMS, LIMIT),
      chooseSplits(p, headsVariant(p, 'sm_90a', LIMIT), SMS, LIMIT),
    );
    assert.equal(tmaPreferred(p, 'sm_90a'), true);
  });
  it('gives a kv head of at most 16 rows one row tile of 8 warps in the one-block form, two where forced', () => {
    for (const [K, N, T] of [
      [8, 32, 1],
      [4, 32, 1],
      [2, 32, 1],
      [1, 16, 1],
    ]) {
      const v = picked(problem({ K, N, T }));
      assert.deepEqual(
        [v.rowGroups, v.rowTiles, v.slices, v.keysPerWarp],
        [1, 1, 8, 16],
        `K=${K} N=${N}: ${(T * N) / K} rows, one tile`,
      );
      assert.match(tmaVariantKey(v), /\.1x1x8\.k128s3f\.g16$/, 'a 16-row page a box');
      assert.equal(picked(problem({ K, N, T, blockSize: 8 })).boxGroup, 8, 'block 8: groups of 8');
      assert.equal(picked(problem({ K, N, T, blockSize: 64 })).boxGroup, 0, 'block 64: half boxes');
      assert.equal(tmaThreads(v), 288);
      assert.equal(tmaSharedBytes(v), 197_760, 'the same stages; 8 warps merge, as row groups');
    }
    decodeTuning.rowTiles = 2;
    const two = picked(problem({ K: 4 }));
    assert.deepEqual(
      [two.rowTiles, two.slices, two.keysPerWarp, two.boxGroup],
      [2, 4, 32, 8],
      'forced: two tiles, one of padding, and the two-tile boxes',
    );
    decodeTuning.rowTiles = 1;
    decodeTuning.rowGroups = 1;
    const mqa = picked(problem({ K: 1 }));
    assert.equal(mqa.rowTiles, 2, '32 rows do not fit one tile: forcing one leaves two');
    delete decodeTuning.rowGroups;
    assert.equal(
      picked(problem({ K: 1, blockSize: 0 })).rowGroups,
      2,
      'row groups keep their one tile a block',
    );
    decodeTuning.rowTiles = 3 as 1;
    assert.throws(() => split(problem({ K: 4 })), /decodeTuning\.rowTiles.*1 or 2.*3/s);
  });
  it('runs row groups where the one-block form splits the keys and both groups have rows: clusters sharing copies on pages of 16 and more, pages of 8 where the grid is small', () => {
    const dense = picked(problem({ blockSize: 0 }));
    assert.deepEqual(
      [dense.rowGroups, dense.rowTiles, dense.slices, dense.keysPerWarp, dense.boxGroup],
      [2, 1, 8, 16, 0],
      'B=64 S=16k dense: two splits of the one-block form become two row groups',
    );
    assert.equal(tmaVariantKey(dense), 'flash-decode-tma.sm_90a.bf16.d128.1x1x8.k128s3f.r2');
    assert.equal(tmaThreads(dense), 288);
    assert.equal(tmaSharedBytes(dense), 197_760, 'the same stages, and 8 warps merge');
    assert.equal(chooseSplits(problem({ blockSize: 0 }), dense, SMS, LIMIT), 1, '128 blocks: one split');
    assert.equal(dense.multicast, false, 'dense: two blocks, the second read an L2 hit');
    const paged64 = picked(problem({ blockSize: 64 }));
    assert.deepEqual(
      [paged64.rowGroups, paged64.boxGroup, paged64.multicast],
      [2, 32, true],
      'block 64: a cluster, grouped boxes of 32 rows',
    );
    assert.match(tmaVariantKey(paged64), /\.r2mc\.g32$/);
    const paged16 = picked(problem({ blockSize: 16 }));
    assert.deepEqual(
      [paged16.rowGroups, paged16.boxGroup, paged16.multicast],
      [2, 16, true],
      'block 16: a cluster, a page a box, each CTA issuing half',
    );
    const paged8 = picked(problem({ blockSize: 8 }));
    assert.deepEqual([paged8.rowGroups, paged8.boxGroup], [1, 8], 'block 8: one block, boxes of 8 rows');
    decodeTuning.multicast = false;
    assert.deepEqual(
      [picked(problem({ blockSize: 16 })).rowGroups, picked(problem({ blockSize: 64 })).multicast],
      [1, false],
      'without clusters, 16-row pages starve two blocks (one block), and block 64 runs two',
    );
    delete decodeTuning.multicast;
    const long = picked(problem({ B: 128, S: 8192, blockSize: 0 }));
    assert.deepEqual([long.rowGroups, long.boxGroup], [1, 0], 'B=128: one split already fills the GPU');
    const wide = picked(problem({ B: 8, S: 131072, blockSize: 64 }));
    assert.equal(wide.rowGroups, 2, 'B=8 S=128k: row groups halve the splits');
    assert.equal(chooseSplits(problem({ B: 8, S: 131072, blockSize: 64 }), wide, SMS, LIMIT), 8);
    assert.equal(
      tmaRowGroups(problem({ N: 16, K: 1 }), 4, 16384, SMS),
      1,
      '16 rows: the second group would have none',
    );
    assert.equal(
      tmaRowGroups(problem({ N: 16, T: 2, blockSize: 0 }), 2, 16384, SMS),
      2,
      'two tokens of N=16: 32 rows',
    );
    assert.equal(tmaRowGroups(problem({ blockSize: 8 }), 2, 16384, SMS), 1, 'block 8, 128 blocks');
    assert.equal(tmaRowGroups(problem({ blockSize: 32 }), 2, 16384, SMS), 2, 'block 32');
    assert.equal(tmaRowGroups(problem({ B: 34, blockSize: 16 }), 2, 16384, SMS), 2, 'block 16: a cluster');
    assert.equal(
      tmaRowGroups(problem({ B: 34, blockSize: 16 }), 2, 16384, SMS, undefined, false),
      1,
      'block 16, 68 blocks, no cluster',
    );
    assert.equal(
      tmaRowGroups(problem({ B: 33, blockSize: 16 }), 2, 16384, SMS, undefined, false),
      2,
      'block 16, 66 blocks: half the GPU',
    );
    assert.equal(tmaRowGroups(problem({ B: 1, blockSize: 8 }), 32, 16384, SMS), 2, 'block 8, B=1, 32 blocks');
  });
  it('keeps a row group to ranges whose second read can still hit the L2', () => {
    const at = (S: number, blockSize = 0) => picked(problem({ S, blockSize }));
    assert.equal(at(32768).rowGroups, 2, 'B=64 S=32k dense: 32k keys a block');
    assert.equal(at(49152, 64).rowGroups, 2, 'B=64 S=48k, block 64: 48k keys a block');
    assert.equal(at(65536).rowGroups, 1, 'B=64 S=64k dense: 64k keys a block in row groups');
    assert.equal(
      chooseSplits(problem({ S: 65536, blockSize: 0 }), at(65536), SMS, LIMIT),
      2,
      'two splits instead',
    );
    assert.equal(at(65536, 64).rowGroups, 1, 'block 64 as dense');
    assert.equal(tmaRowGroups(problem({ S: 65536 }), 2, ROW_GROUP_MAX_KEYS + 1, SMS), 1);
    assert.equal(tmaRowGroups(problem({ S: 65536, blockSize: 0 }), 2, ROW_GROUP_MAX_KEYS, SMS), 2);
    assert.equal(tmaRowGroups(problem({ S: 65536 }), 2, 65536, SMS, 2), 2, 'forced');
    const wide = picked(problem({ B: 8, S: 262144, blockSize: 0 }));
    assert.equal(wide.rowGroups, 2, 'B=8 S=256k: splits keep a block under the bound');
  });
  it('takes a forced form, with boxes that fit the pages', () => {
    decodeTuning.rowGroups = 2;
    assert.deepEqual(
      [picked(problem({ blockSize: 16 })).rowGroups, picked(problem({ blockSize: 16 })).boxGroup],
      [2, 16],
    );
    assert.equal(picked(problem({ blockSize: 8 })).boxGroup, 8);
    decodeTuning.rowGroups = 1;
    const one = picked(problem({ blockSize: 0 }));
    assert.deepEqual([one.rowGroups, one.rowTiles, one.slices, one.boxGroup], [1, 2, 4, 0]);
    assert.equal(picked(problem({ blockSize: 64 })).boxGroup, 0, 'one block, block 64: half boxes of a page');
    decodeTuning.rowGroups = 3 as 2;
    assert.throws(() => split(problem({})), /decodeTuning\.rowGroups/);
  });
  it('runs forced row groups as two-CTA clusters with multicast copies, only in row groups', () => {
    decodeTuning.rowGroups = 2;
    decodeTuning.multicast = true;
    for (const blockSize of [0, 16, 64]) {
      const v = picked(problem({ blockSize }));
      assert.equal(v.multicast, true, `block ${blockSize}`);
      assert.match(tmaVariantKey(v), /\.r2mc(\.g\d+)?$/);
      assert.equal(tmaDefines(v).DECODE_WS_MULTICAST, 1);
    }
    decodeTuning.rowGroups = 1;
    const one = picked(problem({ blockSize: 16 }));
    assert.equal(one.multicast, false, 'the one-block form has no pair to share a tile with');
    assert.equal(tmaDefines(one).DECODE_WS_MULTICAST, 0);
    assert.doesNotMatch(tmaVariantKey(one), /mc/);
    decodeTuning.rowGroups = 2;
    decodeTuning.multicast = false;
    assert.equal(picked(problem({ blockSize: 64 })).multicast, false, 'two independent blocks, forced');
    decodeTuning.multicast = 'yes' as unknown as boolean;
    assert.throws(() => split(problem({})), /decodeTuning\.multicast.*true or false.*yes/);
  });
  it('takes a forced box group that tiles the stage and stays inside a page, and names a wrong one', () => {
    decodeTuning.boxGroup = 16;
    assert.equal(picked(problem({ blockSize: 64 })).boxGroup, 16);
    assert.equal(picked(problem({ blockSize: 0 })).boxGroup, 16, 'dense rows take groups too');
    assert.match(tmaVariantKey(picked(problem({ blockSize: 16 }))), /\.g16$/);
    decodeTuning.boxGroup = 0;
    assert.equal(picked(problem({ blockSize: 16 })).boxGroup, 0, 'half boxes forced at block 16');
    decodeTuning.boxGroup = 32;
    assert.throws(
      () => split(problem({ blockSize: 16 })),
      /decodeTuning\.boxGroup.*at most the block size 16.*32/,
    );
    decodeTuning.boxGroup = 24 as 16;
    assert.throws(() => split(problem({ blockSize: 0 })), /decodeTuning\.boxGroup/);
  });
  it('launches a split call under 1 GiB as dependents by default, and what ATTNLAB_DEPENDENT_LAUNCH asks otherwise', () => {
    const both = { split: true, combine: true };
    const none = { split: false, combine: false };
    const kOneMillion = 64 * 16384 * 1 * 256 * 2; // B=64 S=16k K=1: 0.54 GB
    assert.deepEqual(tmaDependentLaunches('auto', 2, false, kOneMillion), both);
    assert.deepEqual(tmaDependentLaunches('auto', 32, false, 1 * 32768 * 512), both, 'B=1 S=32k');
    assert.deepEqual(tmaDependentLaunches('auto', 2, false, 4 * kOneMillion), none, '2.1 GB: plain');
    assert.deepEqual(
      tmaDependentLaunches('auto', 2, false, DEPENDENT_MAX_BYTES),
      none,
      'the bound is exclusive',
    );
    assert.deepEqual(
      tmaDependentLaunches('auto', 1, false, kOneMillion),
      none,
      'one split: no combine, plain',
    );
    assert.deepEqual(tmaDependentLaunches('auto', 4, true, kOneMillion), none, 'the own combine: one launch');
    assert.deepEqual(tmaDependentLaunches('splits', 4, false, 4 * kOneMillion), both);
    assert.deepEqual(tmaDependentLaunches('splits', 1, false, kOneMillion), none);
    assert.deepEqual(tmaDependentLaunches('all', 1, false, kOneMillion), { split: true, combine: false });
    assert.deepEqual(tmaDependentLaunches('all', 2, false, 4 * kOneMillion), both);
    assert.deepEqual(tmaDependentLaunches('combine', 2, false, kOneMillion), { split: false, combine: true });
    assert.deepEqual(tmaDependentLaunches('off', 2, false, kOneMillion), none);
  });
  it("gives the kernel its form's defines", () => {
    assert.deepEqual(tmaDefines(tmaVariant(problem({ blockSize: 64 }), 'sm_90a', 2)), {
      DECODE_FP16: 0,
      DECODE_WS_RTH: 1,
      DECODE_WS_SLICES: 8,
      DECODE_WS_KPW: 16,
      DECODE_STAGES: 3,
      DECODE_WS_FAST: 1,
      DECODE_WS_GROUP: 32,
      DECODE_WS_ROWGROUPS: 2,
      DECODE_WS_MULTICAST: 0,
    });
  });
  it('maps grouped boxes as 5-D: 64 columns, rows, the two halves 128 B apart, kv head, block', () => {
    const p = problem({ blockSize: 64, K: 2, N: 64 });
    const [k] = tmaMapSpecs(p, tmaVariant(p, 'sm_90a', 2), 0n, 0n);
    assert.deepEqual(
      [k.dims, k.byteStrides, k.box],
      [
        [64, 64, 2, 2, (64 * 16384) / 64 + 3],
        [512, 128, 256, 64 * 512],
        [64, 32, 2, 1, 1],
      ],
    );
    const [g8] = tmaMapSpecs(
      problem({ blockSize: 16 }),
      tmaVariant(problem({ blockSize: 16 }), 'sm_90a', 1),
      0n,
      0n,
    );
    assert.deepEqual([g8.dims[1], g8.box], [16, [64, 8, 2, 1, 1]], 'block 16, one block: groups of 8 rows');
    const d = problem({ blockSize: 0 });
    const [dk] = tmaMapSpecs(d, tmaVariant(d, 'sm_90a', 1), 0n, 0n);
    assert.deepEqual(dk.box, [64, 128, 1, 1], 'one block, dense: half boxes of a tile');
  });
  it('maps a dense cache (H, S, K, B) and a pool (H, blockSize, K, blocks) with a page a box (one block a range)', () => {
    const dense = problem({ blockSize: 0, K: 2, N: 32 });
    const [k, v] = tmaMapSpecs(dense, tmaVariant(dense, 'sm_90a'), 4096n, 8192n);
    assert.deepEqual(
      [k.address, v.address, k.dims, k.byteStrides, k.box],
      [4096n, 8192n, [128, 16384, 2, 64], [512, 256, 16384 * 512], [64, 128, 1, 1]],
    );
    for (const [blockSize, box] of [
      [32, 32],
      [64, 64],
      [256, 128], // a page holds two tiles: a box is a tile
    ]) {
      const p = problem({ blockSize });
      const [pk] = tmaMapSpecs(p, tmaVariant(p, 'sm_90a', 1), 0n, 0n);
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
