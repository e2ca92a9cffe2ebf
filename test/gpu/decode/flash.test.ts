/**
 * The CUDA flash backend's decode kernel (split-KV, dense / paged / packed) against the float64
 * reference of the dense call each stands for, with FlashAttention's accuracy rule. Device memory is
 * poisoned (0xFF = NaN) so an element the kernels forget to write fails; unused pool slots hold NaN
 * so a kernel that reads past a sequence's length fails too. Skips, saying why, without a GPU.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { attention } from '../../../src/api/attention.js';
import { KVCache } from '../../../src/api/kv-cache.js';
import { validateAttention } from '../../../src/api/validate.js';
import { decodeTuning } from '../../../src/backends/cuda/flash/decode/decode-splits.js';
import { cudaAvailable, targetArch } from '../../../src/backends/cuda/runtime/context.js';
import { int32Uploads } from '../../../src/backends/cuda/runtime/int32-cache.js';
import { setAllocationPoison } from '../../../src/backends/cuda/runtime/memory.js';
import type { AttentionOptions } from '../../../src/backends/problem.js';
import { measuredDecodeChoice } from '../../../src/backends/registry.js';
import { reloadConfig } from '../../../src/config.js';
import type { FloatDType } from '../../../src/tensor/dtype.js';
import { randomNormal } from '../../../src/tensor/random.js';
import { Tensor } from '../../../src/tensor/tensor.js';
import { assertMatchesOracle } from '../../support/backend-suite.js';
import { pack, pagedCopy, sliceRows } from '../../support/kv-layouts.js';
import { assertSameNaNs, NAN_WINDOW_OPTIONS } from '../../support/nan-window.js';

const cuda = cudaAvailable();
const skip = cuda.ok ? false : `no CUDA device: ${cuda.reason}`;
const seed = Number(process.env.ATTNLAB_TEST_SEED ?? Date.now() % 1_000_000_000);

interface DecodeCase {
  name: string;
  B: number;
  T: number;
  S: number;
  N: number;
  K: number;
  H: number;
  Hv?: number;
  kvLengths?: number[];
  qLengths?: number[];
  options?: AttentionOptions;
  blockSizes?: number[];
}

const CASES: DecodeCase[] = [
  {
    name: 'GQA 4:1, one token, ragged lengths incl. 0 and 1',
    B: 4,
    T: 1,
    S: 1000,
    N: 8,
    K: 2,
    H: 128,
    kvLengths: [1000, 1, 0, 517],
  },
  { name: 'MQA N=32 (two row tiles)', B: 2, T: 1, S: 3000, N: 32, K: 1, H: 64 },
  {
    name: 'MQA N=16, 3 tokens (48 rows: four row tiles in one block, one of them padding)',
    B: 2,
    T: 3,
    S: 1500,
    N: 16,
    K: 1,
    H: 128,
    options: { isCausal: true, causalAlignment: 'bottom_right' },
  },
  { name: 'H=72, Hv=40 (padded head-dim columns)', B: 2, T: 1, S: 700, N: 4, K: 2, H: 72, Hv: 40 },
  {
    name: 'MHA, 3 new tokens, causal bottom-right',
    B: 2,
    T: 3,
    S: 700,
    N: 4,
    K: 4,
    H: 128,
    options: { isCausal: true, causalAlignment: 'bottom_right' },
  },
  { name: 'long cache, few blocks: many splits + combine', B: 1, T: 1, S: 8192, N: 8, K: 8, H: 128 },
  // Forced onto the heads kernel: all 8 kv heads of a token row in one block (dense: B ≥ 8, 2 stages).
  { name: 'GQA 4:1, N=32, K=8, B=8', B: 8, T: 1, S: 600, N: 32, K: 8, H: 128 },
  { name: 'H=256', B: 2, T: 1, S: 600, N: 4, K: 2, H: 256 },
  { name: 'H=128, Hv=64', B: 2, T: 1, S: 900, N: 8, K: 4, H: 128, Hv: 64 },
  {
    name: 'window [64, 0], 2 tokens',
    B: 2,
    T: 2,
    S: 500,
    N: 4,
    K: 1,
    H: 64,
    options: { isCausal: true, causalAlignment: 'bottom_right', localWindowSize: [64, 0] },
  },
  {
    // A ring step's shape (test/gpu/context-parallel/ring.test.ts, window P=2): queries 40…63 see no key at all, their
    // window starts after the last one; the kernel once read keys 40…47 and the block table past its row.
    name: 'window [0, ∞) over fewer keys than queries (rows past the keys see none)',
    B: 2,
    T: 64,
    S: 40,
    N: 2,
    K: 2,
    H: 64,
    options: { localWindowSize: [0, Number.POSITIVE_INFINITY] },
  },
];

function inputs(c: DecodeCase, dtype: FloatDType, salt: number) {
  const Hv = c.Hv ?? c.H;
  const q = randomNormal([c.B, c.T, c.N, c.H], { seed: seed + salt, dtype });
  const k = randomNormal([c.B, c.S, c.K, c.H], { seed: seed + salt + 1, dtype });
  const v = randomNormal([c.B, c.S, c.K, Hv], { seed: seed + salt + 2, dtype });
  return { q, k, v };
}

/** B=2 S=200 (K=2, N=8, H=64, bf16) in pools of 16-row blocks (5 a sequence), and those on the GPU. */
function pagedOnDevice(name: string, seed: number) {
  const { q, k, v } = inputs({ name, B: 2, T: 1, S: 200, N: 8, K: 2, H: 64 }, 'bfloat16', seed);
  const pk = pagedCopy(k, 16, 5);
  const pv = pagedCopy(v, 16, 5);
  return { q, k, v, pk, dq: q.to('cuda'), dk: pk.pool.to('cuda'), dv: pv.pool.to('cuda') };
}

describe('flash decode kernel', { skip }, () => {
  before(() => {
    console.log(`# decode suite seed ${seed} (ATTNLAB_TEST_SEED=${seed} replays it)`);
    setAllocationPoison(0xff);
  });
  after(() => setAllocationPoison(null));

  CASES.forEach((c, index) => {
    for (const dtype of ['bfloat16', 'float16'] as FloatDType[]) {
      it(`dense: ${c.name} (${dtype})`, () => {
        const { q, k, v } = inputs(c, dtype, index * 10);
        const options: AttentionOptions = { ...c.options, keyValueSeqLengths: c.kvLengths };
        const r = attention(q.to('cuda'), k.to('cuda'), v.to('cuda'), {
          ...options,
          implementation: 'flash',
          returnLogSumExp: true,
        });
        assert.match(r.variant, /^flash-decode/);
        assertMatchesOracle(r, { q, k, v, options }, dtype, `${c.name} ${dtype}`);
      });
    }
    for (const blockSize of [16, 64]) {
      it(`paged (blockSize ${blockSize}): ${c.name}`, () => {
        const dtype = 'bfloat16';
        const { q, k, v } = inputs(c, dtype, index * 10 + 5);
        const lengths = c.kvLengths ?? Array.from({ length: c.B }, (_, b) => c.S - 37 * b);
        const pk = pagedCopy(k, blockSize, seed + index);
        const pv = pagedCopy(v, blockSize, seed + index);
        const options: AttentionOptions = { ...c.options, keyValueSeqLengths: lengths };
        const r = attention(q.to('cuda'), pk.pool.to('cuda'), pv.pool.to('cuda'), {
          ...options,
          blockTable: pk.table,
          implementation: 'flash',
          returnLogSumExp: true,
        });
        assert.match(r.variant, new RegExp(`paged${blockSize}`));
        assertMatchesOracle(r, { q, k, v, options }, dtype, `paged ${blockSize} ${c.name}`);
      });
    }
  });

  // Forced split counts reach the combine with uneven slices (and with empty splits: 17 exceeds the
  // tiles of the short cases); each loader is forced once, whichever is the default.
  // The heads kernel (flash_decode_heads.cu) is forced the same way where it can run (sm_90, H and
  // Hv multiples of 16 up to 128); elsewhere the row-tile kernel takes the case.
  for (const forced of [
    { loader: 'bulk', splits: 3 },
    { loader: 'async', splits: 17 },
    { loader: 'async', splits: undefined },
    { kernel: 'heads', splits: 3 },
    { kernel: 'heads', splits: 17 },
    { kernel: 'rows', splits: undefined },
  ] as const) {
    const what = 'kernel' in forced ? `${forced.kernel} kernel` : `${forced.loader} loader`;
    describe(`forced ${what}, ${forced.splits ?? 'chosen'} splits`, () => {
      before(() => Object.assign(decodeTuning, forced));
      after(() => {
        delete decodeTuning.loader;
        delete decodeTuning.splits;
        delete decodeTuning.kernel;
      });
      CASES.forEach((c, index) => {
        it(`dense and paged 16: ${c.name}`, () => {
          const dtype = 'bfloat16';
          const { q, k, v } = inputs(c, dtype, index * 10 + 3);
          const lengths = c.kvLengths ?? Array.from({ length: c.B }, (_, b) => c.S - 29 * b);
          const options: AttentionOptions = { ...c.options, keyValueSeqLengths: lengths };
          const dense = attention(q.to('cuda'), k.to('cuda'), v.to('cuda'), {
            ...options,
            implementation: 'flash',
            returnLogSumExp: true,
          });
          // The bulk loader needs sm_90 (every case here has 16-byte rows).
          if ('loader' in forced && (forced.loader === 'async' || targetArch() === 'sm_90a'))
            assert.match(dense.variant, new RegExp(`\\.${forced.loader}\\.`));
          const headsFit =
            targetArch() === 'sm_90a' && c.H % 16 === 0 && (c.Hv ?? c.H) % 16 === 0 && c.H <= 128;
          if ('kernel' in forced && (forced.kernel === 'rows' || headsFit))
            assert.match(
              dense.variant,
              forced.kernel === 'heads' ? /^flash-decode-heads\./ : /^flash-decode\.sm/,
            );
          if (forced.splits) assert.match(dense.variant, new RegExp(`split${forced.splits}`));
          assertMatchesOracle(dense, { q, k, v, options }, dtype, `forced dense ${c.name}`);
          const pk = pagedCopy(k, 16, seed + index);
          const pv = pagedCopy(v, 16, seed + index);
          const paged = attention(q.to('cuda'), pk.pool.to('cuda'), pv.pool.to('cuda'), {
            ...options,
            blockTable: pk.table,
            implementation: 'flash',
            returnLogSumExp: true,
          });
          assertMatchesOracle(paged, { q, k, v, options }, dtype, `forced paged ${c.name}`);
        });
      });
    });
  }

  it('packed query and key/value (varlen prefill and decode mixed, causal bottom-right)', () => {
    const dtype = 'bfloat16';
    const qLengths = [1, 5, 0, 17];
    const kvLengths = [100, 5, 3, 300];
    const c = { B: 4, T: 17, S: 300, N: 4, K: 2, H: 64 };
    const { q, k, v } = inputs({ name: 'packed', ...c }, dtype, 500);
    const pq = pack(q, qLengths);
    const pk = pack(k, kvLengths);
    const pv = pack(v, kvLengths);
    const options: AttentionOptions = { isCausal: true, causalAlignment: 'bottom_right' };
    const r = attention(pq.tensor.to('cuda'), pk.tensor.to('cuda'), pv.tensor.to('cuda'), {
      ...options,
      querySeqOffsets: pq.offsets,
      keyValueSeqOffsets: pk.offsets,
      implementation: 'flash',
      returnLogSumExp: true,
    });
    assert.deepEqual(r.output.shape, [23, 4, 64]);
    // The oracle is the padded dense call, packed the same way.
    const dense = {
      q,
      k,
      v,
      options: { ...options, querySeqLengths: qLengths, keyValueSeqLengths: kvLengths },
    };
    const spread = (t: Tensor, width: number) => {
      const host = t.toHost().toFloat64Array();
      const out = new Float64Array(c.B * c.T * c.N * width);
      for (let b = 0, at = 0; b < c.B; b++)
        for (let tt = 0; tt < qLengths[b]; tt++, at++)
          out.set(host.subarray(at * c.N * width, (at + 1) * c.N * width), (b * c.T + tt) * c.N * width);
      return out;
    };
    const output = Tensor.fromArray(spread(r.output, 64), [c.B, c.T, c.N, 64], dtype);
    const lse = Tensor.fromArray(
      spread(r.logSumExp!, 1).map((x, i) => {
        const b = Math.floor(i / (c.T * c.N));
        const t = Math.floor(i / c.N) % c.T;
        return t >= qLengths[b] ? Number.NEGATIVE_INFINITY : x;
      }),
      [c.B, c.T, c.N],
      'float32',
    );
    assertMatchesOracle({ output, logSumExp: lse }, dense, dtype, 'packed');
  });

  it('NaN values reach exactly the rows that see them (2 tokens, window: keys one row sees and the other not)', () => {
    // T=2 bottom-right, window [10, 0]: token 0 sees keys S−12…S−2, token 1 sees S−11…S−1.
    const c = { B: 1, T: 2, S: 300, N: 4, K: 1, H: 64 };
    const { q, k, v } = inputs({ name: 'nan', ...c }, 'bfloat16', 700);
    const values = v.toFloat64Array();
    values[(c.S - 1) * 64 + 3] = Number.NaN; // only token 1 sees key S−1
    values[(c.S - 12) * 64 + 7] = Number.NaN; // only token 0 sees key S−12
    for (let j = 0; j < 200; j++) values[j * 64 + 9] = Number.NaN; // nobody sees keys 0…199
    const poisoned = Tensor.fromArray(values, v.shape, 'bfloat16');
    const options = NAN_WINDOW_OPTIONS;
    const expected = attention(q, k, poisoned, {
      ...options,
      implementation: 'reference',
    }).output.toFloat64Array();
    for (const blockSize of [0, 16]) {
      const pk = pagedCopy(k, blockSize || 16, 1);
      const pv = pagedCopy(poisoned, blockSize || 16, 1);
      const r = blockSize
        ? attention(q.to('cuda'), pk.pool.to('cuda'), pv.pool.to('cuda'), {
            ...options,
            blockTable: pk.table,
            keyValueSeqLengths: [c.S],
            implementation: 'flash',
          })
        : attention(q.to('cuda'), k.to('cuda'), poisoned.to('cuda'), { ...options, implementation: 'flash' });
      assertSameNaNs(
        r.output.toFloat64Array(),
        expected,
        (i) => `blockSize ${blockSize} element ${i} (token ${Math.floor(i / 256)}, column ${i % 64})`,
      );
    }
  });

  it('a NaN value at a visible position makes exactly that output column NaN', () => {
    const c = { B: 1, T: 1, S: 260, N: 2, K: 1, H: 64 };
    const { q, k, v } = inputs({ name: 'nan2', ...c }, 'bfloat16', 800);
    const values = v.toFloat64Array();
    values[100 * 64 + 5] = Number.NaN;
    const poisoned = Tensor.fromArray(values, v.shape, 'bfloat16').to('cuda');
    const out = attention(q.to('cuda'), k.to('cuda'), poisoned, {
      implementation: 'flash',
    }).output.toFloat64Array();
    for (let n = 0; n < 2; n++)
      for (let h = 0; h < 64; h++)
        assert.equal(Number.isNaN(out[n * 64 + h]), h === 5, `head ${n} column ${h}`);
  });

  it('a repeated paged call uploads nothing: its table and lengths stay on the device (int32-cache.ts)', () => {
    const { q, k, v, pk, dq, dk, dv } = pagedOnDevice('uploads', 950);
    const call = (lengths: number[]) =>
      attention(dq, dk, dv, {
        blockTable: pk.table,
        keyValueSeqLengths: lengths,
        implementation: 'flash',
        returnLogSumExp: true,
      });
    const first = call([200, 150]).output.toFloat64Array();
    const before = int32Uploads();
    const again = call([200, 150]).output.toFloat64Array();
    assert.equal(int32Uploads(), before, 'the same table and lengths again: no upload');
    assert.deepEqual(again, first);
    // New lengths are rewritten into the plan's own lengths buffer (decode.ts keptLengths), so that the
    // launches keep their pointers; the int32 cache gains no entry, and the result follows the new lengths.
    const shorter = call([200, 100]);
    assert.equal(int32Uploads(), before);
    assertMatchesOracle(
      shorter,
      { q, k, v, options: { keyValueSeqLengths: [200, 100] } },
      'bfloat16',
      'after the lengths changed',
    );
  });

  it('takes the table, lengths and offsets as int32 tensors on the GPU, equal to arrays', () => {
    const { q, k, v, pk, dq, dk, dv } = pagedOnDevice('device ints', 960);
    const ints = (values: number[], shape = [values.length]) =>
      Tensor.fromArray(values, shape, 'int32').to('cuda');
    const options = { implementation: 'flash', returnLogSumExp: true } as const;
    const arrays = attention(dq, dk, dv, { ...options, blockTable: pk.table, keyValueSeqLengths: [200, 73] });
    const tensors = attention(dq, dk, dv, {
      ...options,
      blockTable: ints(pk.table.flat(), [2, pk.M]),
      keyValueSeqLengths: ints([200, 73]),
    });
    assert.deepEqual(tensors.output.toFloat64Array(), arrays.output.toFloat64Array());
    assertMatchesOracle(
      tensors,
      { q, k, v, options: { keyValueSeqLengths: [200, 73] } },
      'bfloat16',
      'device ints',
    );
    // Packed: the same rows with device offsets.
    const packedK = pack(k, [200, 73]);
    const packedV = pack(v, [200, 73]);
    const packedQ = pack(q, [1, 1]);
    const packed = (qo: unknown, ko: unknown) =>
      attention(packedQ.tensor.to('cuda'), packedK.tensor.to('cuda'), packedV.tensor.to('cuda'), {
        implementation: 'flash',
        querySeqOffsets: qo as number[],
        keyValueSeqOffsets: ko as number[],
      }).output.toFloat64Array();
    assert.deepEqual(packed(ints([0, 1, 2]), ints([0, 200, 273])), packed([0, 1, 2], [0, 200, 273]));
  });

  /** Runs `fn` with calibrated tables ignored (ATTNLAB_TUNE=0): a table `attnlab tune` left here comes first. */
  const recordedOnly = (fn: () => void) => {
    process.env.ATTNLAB_TUNE = '0';
    reloadConfig();
    try {
      fn();
    } finally {
      delete process.env.ATTNLAB_TUNE;
      reloadConfig();
    }
  };

  it('auto runs a paged decode step where the measured decode table says: a table with room, a tight one', () =>
    recordedOnly(() => {
      // B=1, S=2k, K=8, N=32, H=128, block 16 is a measured case (decode-dispatch-table.ts): on the H200
      // what the table says while the table has room for the next block (flash in the recorded table),
      // flash once it is tight (cuDNN would build a graph per table width as the
      // cache grows); elsewhere whatever the table says, flash by default.
      const c = { B: 1, T: 1, S: 2064, N: 32, K: 8, H: 128 };
      const { q, k, v } = inputs({ name: 'auto', ...c }, 'bfloat16', 1100);
      const pk = pagedCopy(k, 16, 11);
      const pv = pagedCopy(v, 16, 11);
      const [dq, dk, dv] = [q.to('cuda'), pk.pool.to('cuda'), pv.pool.to('cuda')];
      for (const [length, tight] of [
        [2048, false],
        [2064, true],
      ] as const) {
        const options: AttentionOptions = {
          isCausal: true,
          causalAlignment: 'bottom_right',
          keyValueSeqLengths: [length],
        };
        const problem = validateAttention(dq, dk, dv, { ...options, blockTable: pk.table });
        const expected = measuredDecodeChoice(problem)?.order[0] ?? 'flash';
        if (tight) assert.equal(expected, 'flash', 'a tight table never takes cudnn');
        const r = attention(dq, dk, dv, { ...options, blockTable: pk.table, returnLogSumExp: true });
        assert.equal(r.backend, expected, `${length} tokens in a table of ${pk.M} blocks: ${r.variant}`);
        assertMatchesOracle(r, { q, k, v, options }, 'bfloat16', `auto, ${length} tokens`);
      }
    }));

  it('auto runs a dense decode step where the measured decode table says (cudnn, the registry order, elsewhere)', () =>
    recordedOnly(() => {
      // B=1, S=32k, K=8, N=32, H=128 on a dense cache is a measured case on the H200 (decode-dispatch-table.ts:
      // cudnn); with 2 new tokens it is not (the table speaks for one), and the registry's order holds.
      const c = { B: 1, T: 2, S: 32768, N: 32, K: 8, H: 128 };
      const { q, k, v } = inputs({ name: 'auto dense', ...c }, 'bfloat16', 1200);
      const [dk, dv] = [k.to('cuda'), v.to('cuda')];
      for (const T of [1, 2]) {
        const qt = sliceRows(q, 0, T);
        const dq = qt.to('cuda');
        const options: AttentionOptions = { isCausal: true, causalAlignment: 'bottom_right' };
        const problem = validateAttention(dq, dk, dv, options);
        const measured = measuredDecodeChoice(problem);
        if (T === 2) assert.equal(measured, null, 'two new tokens: no measured decode step speaks for it');
        const r = attention(dq, dk, dv, { ...options, returnLogSumExp: true });
        if (measured) assert.equal(r.backend, measured.order[0], `T=${T}: ${r.variant}`);
        assertMatchesOracle(r, { q: qt, k, v, options }, 'bfloat16', `auto dense, T=${T}`);
      }
    }));

  it('a 1,000-step decode loop through KVCache equals one causal prefill over the final sequences', () => {
    const [B, L, N, K, H] = [2, 1000, 8, 2, 64];
    const dtype = 'bfloat16';
    const q = randomNormal([B, L, N, H], { seed: seed + 900, dtype });
    const k = randomNormal([B, L, K, H], { seed: seed + 901, dtype });
    const v = randomNormal([B, L, K, H], { seed: seed + 902, dtype });
    const cache = new KVCache({ numBlocks: 2 * Math.ceil(L / 16), blockSize: 16, numKvHeads: K, headDim: H });
    const ids = [cache.addSequence(), cache.addSequence()];
    const out = new Uint16Array(B * L * N * H);
    const row = N * H;
    let variant = '';
    for (let t = 0; t < L; t++) {
      const [kt, vt, qt] = [
        sliceRows(k, t, 1).to('cuda'),
        sliceRows(v, t, 1).to('cuda'),
        sliceRows(q, t, 1).to('cuda'),
      ];
      cache.append(ids, kt, vt);
      const r = cache.attention(qt, ids, { implementation: 'flash' });
      variant = r.variant;
      const step = r.output.toHost().data as Uint16Array;
      for (let b = 0; b < B; b++) out.set(step.subarray(b * row, (b + 1) * row), (b * L + t) * row);
      for (const x of [kt, vt, qt, r.output]) x.dispose();
    }
    cache.dispose();
    assert.match(variant, /flash-decode.*paged16/);
    const output = Tensor.fromRaw(out, [B, L, N, H], dtype);
    const oracleOptions: AttentionOptions = { isCausal: true };
    assertMatchesOracle(
      {
        output,
        logSumExp: attention(q, k, v, { isCausal: true, implementation: 'reference', returnLogSumExp: true })
          .logSumExp,
      },
      { q, k, v, options: oracleOptions },
      dtype,
      'decode loop',
    );
  });

  it("a KVCache attending to other sequences than it appended to (the lengths its append wrote for the step miss) equals a CPU KVCache's", () => {
    // An append writes the lengths its cache's last attention read, as they will be after it, with its slots
    // (runtime/lengths-mirror.ts); a step whose lengths differ uploads its own. Both kinds of step here.
    const [K, H, N] = [2, 64, 4];
    const dtype = 'bfloat16';
    const options = { numBlocks: 64, blockSize: 16, numKvHeads: K, headDim: H };
    const gpu = new KVCache(options);
    const cpu = new KVCache({ ...options, device: 'cpu' });
    const ids = [0, 1, 2].map(() => [gpu.addSequence(), cpu.addSequence()]);
    [37, 70, 5].forEach((length, i) => {
      const k = randomNormal([1, length, K, H], { seed: seed + 950 + i, dtype });
      const v = randomNormal([1, length, K, H], { seed: seed + 960 + i, dtype });
      gpu.append([ids[i][0]], k.to('cuda'), v.to('cuda'));
      cpu.append([ids[i][1]], k, v);
    });
    const appends = [[0, 1, 2], [1], [2, 0], [0, 1, 2], [1, 2]];
    const reads = [[0, 1, 2], [2, 1], [1], [0, 1, 2], [0, 2], [2, 0, 1]];
    let worst = 0;
    for (let step = 0; step < 30; step++) {
      const a = appends[step % appends.length];
      const k = randomNormal([a.length, 1, K, H], { seed: seed + 1000 + step, dtype });
      const v = randomNormal([a.length, 1, K, H], { seed: seed + 2000 + step, dtype });
      gpu.append(
        a.map((i) => ids[i][0]),
        k.to('cuda'),
        v.to('cuda'),
      );
      cpu.append(
        a.map((i) => ids[i][1]),
        k,
        v,
      );
      const r = reads[step % reads.length];
      const q = randomNormal([r.length, 1, N, H], { seed: seed + 3000 + step, dtype });
      const onGpu = gpu.attention(
        q.to('cuda'),
        r.map((i) => ids[i][0]),
        { implementation: 'flash' },
      ).output;
      const onCpu = cpu.attention(
        q,
        r.map((i) => ids[i][1]),
      ).output;
      const x = onGpu.toHost().astype('float64').data as Float64Array;
      const y = onCpu.astype('float64').data as Float64Array;
      for (let j = 0; j < x.length; j++) worst = Math.max(worst, Math.abs(x[j] - y[j]));
      onGpu.dispose();
    }
    gpu.dispose();
    // bf16 outputs below 1 in magnitude: a few roundings of 2^-8 relative. A length one token off moves the
    // 6-token sequence's outputs by ~1/6 of a value's size, far past this.
    assert.ok(worst <= 2 ** -6, `largest difference ${worst}`);
  });
});
