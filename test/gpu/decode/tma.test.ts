/**
 * The TMA decode kernel (flash_decode_ws.cu with decode_tma.cuh, decode-tma.ts) against the float64
 * reference of the dense call: forced (decodeTuning.kernel = 'tma') in both forms (one block a key range,
 * and row groups: two, each its row tile) over dense caches and paged pools of block 8, 16, 32, 64 and 256
 * (half boxes and grouped boxes of 8, 16, 32 rows) with shuffled tables, ragged lengths incl. 0 and 1,
 * forced split counts, both places the splits merge (the combine kernel, or the split kernel's last block:
 * decodeTuning.combine), windows, fp16, and the NaN rule; then the measured choice at the shape it was
 * measured on, and a decode loop of appends (plain launches, and programmatic dependents). Rows past a
 * sequence hold NaN in the dense cache and in the pool (the kernel copies whole pages and boxes: those
 * rows must never reach the output). Skips, saying why, off sm_90.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { attention } from '../../../src/api/attention.js';
import { KVCache } from '../../../src/api/kv-cache.js';
import { decodeTuning } from '../../../src/backends/cuda/flash/decode/decode-splits.js';
import { cudaAvailable, targetArch } from '../../../src/backends/cuda/runtime/context.js';
import { setAllocationPoison } from '../../../src/backends/cuda/runtime/memory.js';
import type { AttentionOptions, AttentionResult } from '../../../src/backends/problem.js';
import { reloadConfig } from '../../../src/config.js';
import type { FloatDType } from '../../../src/tensor/dtype.js';
import { randomNormal } from '../../../src/tensor/random.js';
import { Tensor } from '../../../src/tensor/tensor.js';
import { assertMatchesOracle } from '../../support/backend-suite.js';
import { pagedCopy, sliceRows } from '../../support/kv-layouts.js';
import { assertSameNaNs, NAN_WINDOW_OPTIONS } from '../../support/nan-window.js';

const cuda = cudaAvailable();
const skip = !cuda.ok
  ? `no CUDA device: ${cuda.reason}`
  : targetArch() !== 'sm_90a'
    ? `${targetArch()}: the TMA decode kernel runs on sm_90`
    : false;
const seed = Number(process.env.ATTNLAB_TEST_SEED ?? Date.now() % 1_000_000_000);

/** A case's sizes (H = Hv = 128), its key lengths and options. */
interface TmaCase extends Record<'B' | 'T' | 'S' | 'N' | 'K', number> {
  name: string;
  lengths: number[];
  options?: AttentionOptions;
}

const CASES: TmaCase[] = [
  {
    name: 'MQA N=32, ragged lengths incl. 0 and 1',
    B: 4,
    T: 1,
    S: 3000,
    N: 32,
    K: 1,
    lengths: [3000, 1, 0, 2963],
  },
  {
    name: 'GQA 8:1, K=2 (16 rows per kv head: one row tile of padding)',
    B: 2,
    T: 1,
    S: 1000,
    N: 16,
    K: 2,
    lengths: [1000, 517],
  },
  {
    name: 'GQA 4:1, K=8 N=32 (4 rows per kv head: eight kv heads a token)',
    B: 3,
    T: 1,
    S: 900,
    N: 32,
    K: 8,
    lengths: [900, 417, 2],
  },
  {
    name: 'window [64, 0], 2 tokens (tiles start before the window: masked keys in copied pages)',
    B: 2,
    T: 2,
    S: 700,
    N: 16,
    K: 1,
    lengths: [700, 3],
    options: { isCausal: true, causalAlignment: 'bottom_right', localWindowSize: [64, 0] },
  },
];

/** q, k, v with k and v NaN at rows past each sequence's length. */
function inputs(c: TmaCase, dtype: FloatDType, salt: number) {
  const q = randomNormal([c.B, c.T, c.N, 128], { seed: seed + salt, dtype });
  const poisonPast = (t: Tensor) => {
    const x = t.toFloat64Array();
    const row = c.K * 128;
    for (let b = 0; b < c.B; b++) x.fill(Number.NaN, (b * c.S + c.lengths[b]) * row, (b + 1) * c.S * row);
    return Tensor.fromArray(x, t.shape, dtype);
  };
  const k = poisonPast(randomNormal([c.B, c.S, c.K, 128], { seed: seed + salt + 1, dtype }));
  const v = poisonPast(randomNormal([c.B, c.S, c.K, 128], { seed: seed + salt + 2, dtype }));
  return { q, k, v };
}

function run(q: Tensor, k: Tensor, v: Tensor, blockSize: number, options: AttentionOptions, salt: number) {
  if (!blockSize)
    return attention(q.to('cuda'), k.to('cuda'), v.to('cuda'), {
      ...options,
      implementation: 'flash',
      returnLogSumExp: true,
    });
  const pk = pagedCopy(k, blockSize, seed + salt);
  const pv = pagedCopy(v, blockSize, seed + salt);
  return attention(q.to('cuda'), pk.pool.to('cuda'), pv.pool.to('cuda'), {
    ...options,
    blockTable: pk.table,
    implementation: 'flash',
    returnLogSumExp: true,
  });
}

describe('flash decode, TMA kernel', { skip }, () => {
  before(() => {
    console.log(`# decode/tma suite seed ${seed} (ATTNLAB_TEST_SEED=${seed} replays it)`);
    setAllocationPoison(0xff);
  });
  after(() => {
    setAllocationPoison(null);
    delete decodeTuning.kernel;
    delete decodeTuning.splits;
    delete decodeTuning.rowGroups;
    delete decodeTuning.rowTiles;
    delete decodeTuning.combine;
    delete decodeTuning.multicast;
  });

  describe('forced', () => {
    before(() => {
      decodeTuning.kernel = 'tma';
    });
    after(() => {
      delete decodeTuning.kernel;
      delete decodeTuning.splits;
      delete decodeTuning.rowGroups;
      delete decodeTuning.multicast;
    });
    // The forms: one block a key range, row groups of two blocks, and row groups as two-CTA clusters whose
    // producers multicast each half of a tile into both (decodeTuning.multicast).
    const FORMS = [
      { name: '1 row group(s)', rowGroups: 1, multicast: false, variant: /^flash-decode-tma\.(?!.*\.r2)/ },
      { name: '2 row group(s)', rowGroups: 2, multicast: false, variant: /^flash-decode-tma\..*\.r2(?!mc)/ },
      { name: 'clustered row groups', rowGroups: 2, multicast: true, variant: /^flash-decode-tma\..*\.r2mc/ },
    ] as const;
    CASES.forEach((c, index) => {
      for (const form of FORMS)
        for (const splits of [undefined, 1, 3, 17]) {
          it(`${c.name}, ${form.name}, ${splits ?? 'chosen'} splits: dense, paged 8…256`, () => {
            decodeTuning.rowGroups = form.rowGroups;
            decodeTuning.multicast = form.multicast;
            if (splits) decodeTuning.splits = splits;
            else delete decodeTuning.splits;
            const { q, k, v } = inputs(c, 'bfloat16', index * 10);
            const options: AttentionOptions = { ...c.options, keyValueSeqLengths: c.lengths };
            for (const blockSize of [0, 8, 16, 32, 64, 256]) {
              const r = run(q, k, v, blockSize, options, index + blockSize);
              assert.match(r.variant, form.variant);
              if (splits) assert.match(r.variant, new RegExp(`split${splits}`));
              assertMatchesOracle(
                r,
                { q, k, v, options },
                'bfloat16',
                `${c.name} block ${blockSize}, ${form.name}, splits ${splits}`,
              );
            }
          });
        }
    });

    it('keeps two row tiles where forced on kv heads of at most 16 rows (K=2 N=16, K=8 N=32), 3 splits: dense, paged 8…256', () => {
      try {
        decodeTuning.rowTiles = 2;
        decodeTuning.splits = 3;
        for (const index of [1, 2]) {
          const c = CASES[index];
          const { q, k, v } = inputs(c, 'bfloat16', index * 10 + 5);
          const options: AttentionOptions = { ...c.options, keyValueSeqLengths: c.lengths };
          for (const blockSize of [0, 8, 16, 32, 64, 256]) {
            const r = run(q, k, v, blockSize, options, index + blockSize + 5);
            assert.match(r.variant, /^flash-decode-tma\..*\.1x2x4\..*split3/);
            assertMatchesOracle(
              r,
              { q, k, v, options },
              'bfloat16',
              `${c.name} block ${blockSize}, two tiles`,
            );
          }
        }
      } finally {
        delete decodeTuning.rowTiles;
        delete decodeTuning.splits;
      }
    });

    it('merges the splits in the split kernel or the combine kernel, either at any count (ragged, window)', () => {
      try {
        for (const [c, index] of [
          [CASES[0], 0],
          [CASES[3], 3],
        ] as const)
          for (const [combine, splits, multicast] of [
            ['kernel', 3, false],
            ['fused', 17, false],
            ['fused', 2, false],
            ['fused', 3, true],
          ] as const) {
            decodeTuning.combine = combine;
            decodeTuning.splits = splits;
            if (multicast) Object.assign(decodeTuning, { rowGroups: 2, multicast });
            const { q, k, v } = inputs(c, 'bfloat16', index * 10);
            const options: AttentionOptions = { ...c.options, keyValueSeqLengths: c.lengths };
            for (const blockSize of [0, 16]) {
              const r = run(q, k, v, blockSize, options, index + blockSize);
              assert.match(
                r.variant,
                new RegExp(`split${splits}${combine === 'fused' ? '\\.fused' : '(?!\\.fused)'}`),
              );
              assertMatchesOracle(
                r,
                { q, k, v, options },
                'bfloat16',
                `${c.name} block ${blockSize}, ${combine} ${splits}${multicast ? ', clustered row groups' : ''}`,
              );
            }
            delete decodeTuning.rowGroups;
            delete decodeTuning.multicast;
          }
      } finally {
        delete decodeTuning.combine;
        delete decodeTuning.splits;
        delete decodeTuning.rowGroups;
        delete decodeTuning.multicast;
      }
    });

    it('float16, dense and paged 16', () => {
      const c = CASES[0];
      const { q, k, v } = inputs(c, 'float16', 40);
      const options: AttentionOptions = { keyValueSeqLengths: c.lengths };
      for (const blockSize of [0, 16]) {
        const r = run(q, k, v, blockSize, options, 41 + blockSize);
        assert.match(r.variant, /^flash-decode-tma\.sm_90a\.f16/);
        assertMatchesOracle(r, { q, k, v, options }, 'float16', `float16 block ${blockSize}`);
      }
    });

    it('NaN in V and K reaches exactly the rows that see it (window [10, 0], 2 tokens)', () => {
      // Token 0 sees keys S−12…S−2, token 1 sees S−11…S−1 (bottom-right); keys 0…199 nobody sees.
      const c: TmaCase = { name: 'nan', B: 1, T: 2, S: 300, N: 16, K: 1, lengths: [300] };
      const { q, k, v } = inputs(c, 'bfloat16', 60);
      const vs = v.toFloat64Array();
      vs[(c.S - 1) * 128 + 3] = Number.NaN; // only token 1 sees it
      for (let j = 0; j < 200; j++) vs[j * 128 + 9] = Number.NaN; // nobody sees these
      const ks = k.toFloat64Array();
      ks[(c.S - 12) * 128] = Number.NaN; // a NaN logit only token 0 sees
      const [kk, vv] = [Tensor.fromArray(ks, k.shape, 'bfloat16'), Tensor.fromArray(vs, v.shape, 'bfloat16')];
      const options: AttentionOptions = { ...NAN_WINDOW_OPTIONS, keyValueSeqLengths: c.lengths };
      const expected = attention(q, kk, vv, {
        ...options,
        implementation: 'reference',
      }).output.toFloat64Array();
      assert.ok(
        expected.some(Number.isNaN) && !expected.every(Number.isNaN),
        'the case has NaN and finite outputs',
      );
      for (const blockSize of [0, 16, 64]) {
        const r = run(q, kk, vv, blockSize, options, 61 + blockSize);
        assert.match(r.variant, /^flash-decode-tma\./);
        assertSameNaNs(
          r.output.toFloat64Array(),
          expected,
          (i) => `block ${blockSize} element ${i} (token ${Math.floor(i / (16 * 128))}, column ${i % 128})`,
        );
      }
    });
  });

  it('runs by default where measured (MQA N=32, B·S = 128k, block 16: clustered row groups), equal to the forced heads kernel', () => {
    const c: TmaCase = { name: 'measured', B: 8, T: 1, S: 16384, N: 32, K: 1, lengths: Array(8).fill(16384) };
    const { q, k, v } = inputs(c, 'bfloat16', 80);
    const options: AttentionOptions = { keyValueSeqLengths: c.lengths };
    const chosen = run(q, k, v, 16, options, 81);
    assert.match(
      chosen.variant,
      /^flash-decode-tma\.sm_90a\.bf16\.d128\.1x1x8\.k128s3f\.r2mc\.g16\.split\d+(\.fused)?\.paged16$/,
    );
    decodeTuning.kernel = 'heads';
    try {
      const heads = run(q, k, v, 16, options, 81);
      assert.match(heads.variant, /^flash-decode-heads\./);
      const [a, b] = [chosen.output.toFloat64Array(), heads.output.toFloat64Array()];
      const [la, lb] = [chosen.logSumExp!.toFloat64Array(), heads.logSumExp!.toFloat64Array()];
      let worst = 0;
      for (let i = 0; i < a.length; i++) worst = Math.max(worst, Math.abs(a[i] - b[i]));
      for (let i = 0; i < la.length; i++) worst = Math.max(worst, Math.abs(la[i] - lb[i]) / 100);
      assert.ok(worst < 1e-2, `largest difference from the heads kernel ${worst}`);
    } finally {
      delete decodeTuning.kernel;
    }
  });

  it('runs by default with 4 rows a kv head (as K=8 N=32) where the heads kernel would (B·S = 128k), in one row tile (two forced), equal to it', () => {
    // K=2 N=8 rather than K=8 N=32: the same rows a kv head with a quarter of the host copies.
    const c: TmaCase = { name: 'GQA 4:1', B: 8, T: 1, S: 16384, N: 8, K: 2, lengths: Array(8).fill(16384) };
    const { q, k, v } = inputs(c, 'bfloat16', 100);
    const options: AttentionOptions = { keyValueSeqLengths: c.lengths };
    for (const rowTiles of [undefined, 2] as const)
      for (const blockSize of [0, 16, 64]) {
        if (rowTiles) decodeTuning.rowTiles = rowTiles;
        const chosen = run(q, k, v, blockSize, options, 101 + blockSize);
        delete decodeTuning.rowTiles;
        assert.match(
          chosen.variant,
          rowTiles === 2
            ? /^flash-decode-tma\.sm_90a\.bf16\.d128\.1x2x4\.k128s3f/
            : /^flash-decode-tma\.sm_90a\.bf16\.d128\.1x1x8\.k128s3f(?!.*\.r2)/,
        );
        decodeTuning.kernel = 'heads';
        try {
          const heads = run(q, k, v, blockSize, options, 101 + blockSize);
          assert.match(heads.variant, /^flash-decode-heads\./);
          const [a, b] = [chosen.output.toFloat64Array(), heads.output.toFloat64Array()];
          let worst = 0;
          for (let i = 0; i < a.length; i++) worst = Math.max(worst, Math.abs(a[i] - b[i]));
          assert.ok(
            worst < 1e-2,
            `block ${blockSize}, ${rowTiles ?? 1} row tile(s): largest difference from the heads kernel ${worst}`,
          );
        } finally {
          delete decodeTuning.kernel;
        }
      }
  });

  it('runs row groups by default on a short MQA cache (B=1 S=32k), pages of 16 included', () => {
    const c: TmaCase = { name: 'short', B: 1, T: 1, S: 32768, N: 32, K: 1, lengths: [32768] };
    const { q, k, v } = inputs(c, 'bfloat16', 110);
    const options: AttentionOptions = { keyValueSeqLengths: c.lengths };
    for (const blockSize of [0, 16, 64]) {
      const chosen = run(q, k, v, blockSize, options, 111 + blockSize);
      assert.match(chosen.variant, /^flash-decode-tma\.sm_90a\.bf16\.d128\.1x1x8\.k128s3f\.r2/);
      assertMatchesOracle(chosen, { q, k, v, options }, 'bfloat16', `short cache, block ${blockSize}`);
    }
  });

  it('runs row groups by default on dense and block-64 caches at that shape', () => {
    const c: TmaCase = {
      name: 'groups',
      B: 8,
      T: 1,
      S: 16384,
      N: 32,
      K: 1,
      lengths: Array(8).fill(16384),
    };
    const { q, k, v } = inputs(c, 'bfloat16', 90);
    const options: AttentionOptions = { keyValueSeqLengths: c.lengths };
    for (const blockSize of [0, 64]) {
      const chosen = run(q, k, v, blockSize, options, 91 + blockSize);
      assert.match(
        chosen.variant,
        blockSize
          ? /^flash-decode-tma\.sm_90a\.bf16\.d128\.1x1x8\.k128s3f\.r2mc\./
          : /^flash-decode-tma\.sm_90a\.bf16\.d128\.1x1x8\.k128s3f\.r2(?!mc)/,
      );
      assertMatchesOracle(
        chosen,
        { q, k, v, options },
        'bfloat16',
        `row groups by default, block ${blockSize}`,
      );
    }
  });

  it("a decode loop of appends reads each step's cache (the kernel waits for the append before it), plain and dependent", () => {
    // 40 steps of B=3 MQA N=32 with no host wait between an append and the attention after it: the TMA
    // kernel must see the rows the append before it wrote, plain or as a programmatic dependent.
    const [B, L, N, H] = [3, 40, 32, 128];
    const dtype = 'bfloat16';
    const prefix = 600;
    const q = randomNormal([B, L, N, H], { seed: seed + 95, dtype });
    const k = randomNormal([B, prefix + L, 1, H], { seed: seed + 96, dtype });
    const v = randomNormal([B, prefix + L, 1, H], { seed: seed + 97, dtype });
    for (const [rowGroups, dependent, multicast] of [
      [1, '0', false],
      [2, '0', false],
      [1, '1', false],
      [2, '1', false],
      [1, 'combine', false],
      [1, 'splits', false],
      [2, 'auto', false],
      [2, '0', true],
      [2, '1', true],
    ] as const) {
      decodeTuning.kernel = 'tma';
      decodeTuning.rowGroups = rowGroups;
      decodeTuning.multicast = multicast;
      process.env.ATTNLAB_DEPENDENT_LAUNCH = dependent;
      reloadConfig();
      const cache = new KVCache({
        numBlocks: B * Math.ceil((prefix + L) / 64) + 4,
        blockSize: 64,
        numKvHeads: 1,
        headDim: H,
      });
      const ids = Array.from({ length: B }, () => cache.addSequence());
      try {
        cache.append(ids, sliceRows(k, 0, prefix).to('cuda'), sliceRows(v, 0, prefix).to('cuda'));
        const outputs: AttentionResult[] = [];
        for (let t = 0; t < L; t++) {
          cache.append(ids, sliceRows(k, prefix + t, 1).to('cuda'), sliceRows(v, prefix + t, 1).to('cuda'));
          const r = cache.attention(sliceRows(q, t, 1).to('cuda'), ids, {
            implementation: 'flash',
            returnLogSumExp: true,
          });
          assert.match(r.variant, /^flash-decode-tma\./);
          outputs.push(r);
        }
        for (const t of [0, 1, L / 2, L - 1]) {
          const kt = sliceRows(k, 0, prefix + t + 1);
          const vt = sliceRows(v, 0, prefix + t + 1);
          const qt = sliceRows(q, t, 1);
          assertMatchesOracle(
            { output: outputs[t].output.toHost(), logSumExp: outputs[t].logSumExp?.toHost() },
            { q: qt, k: kt, v: vt, options: {} },
            dtype,
            `step ${t}, ${rowGroups} row group(s)${multicast ? ` in clusters (${multicast})` : ''}, ATTNLAB_DEPENDENT_LAUNCH=${dependent}`,
          );
        }
      } finally {
        cache.dispose();
        delete decodeTuning.kernel;
        delete decodeTuning.rowGroups;
        delete decodeTuning.multicast;
        delete process.env.ATTNLAB_DEPENDENT_LAUNCH;
        reloadConfig();
      }
    }
  });
});
