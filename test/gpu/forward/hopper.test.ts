/**
 * The flash backend's Hopper kernel (wgmma + TMA, sm_90a) against the float64 CPU reference: every
 * case it covers — bf16/fp16, H = 64, 128, 192, 256 (and head dims padded up to them: 48, 96, 160,
 * 120/128, 256/232), key and value head dims of different box counts (192/128, 128/64, 256/128,
 * 64/256, 160/96), MHA/GQA/MQA, causal both alignments, local windows, padding lengths (a batch with no
 * keys), additive bias, boolean masks, several tiles — runs with variant `….wgmma`; results are bit-identical
 * across runs; NaN in padded keys and values stays out, a NaN query row comes out NaN; a case it
 * does not cover runs on mma.sync. Skips off compute capability 9.0, and while the kernel is off
 * (run it with ATTNLAB_FLASH_KERNEL=wgmma). The shared matrix
 * (test/gpu/forward/flash.test.ts) also reaches this kernel for its H = 64/128/192/256 cases on the H200.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { attention } from '../../../src/api/attention.js';
import { HOPPER_BY_DEFAULT } from '../../../src/backends/cuda/flash/sm90/hopper-variant.js';
import { cudaAvailable, getCudaContext } from '../../../src/backends/cuda/runtime/context.js';
import { setAllocationPoison } from '../../../src/backends/cuda/runtime/memory.js';
import { type AttentionCase, buildInputs } from '../../../src/check/cases.js';
import { config } from '../../../src/config.js';
import type { FloatDType } from '../../../src/tensor/dtype.js';
import { randomNormal } from '../../../src/tensor/random.js';
import { Tensor } from '../../../src/tensor/tensor.js';
import { assertMatchesOracle } from '../../support/backend-suite.js';

const cuda = cudaAvailable();
const hopper = cuda.ok && getCudaContext().properties.computeCapability.major === 9;
// This file runs when the Hopper kernel is on: by default (HOPPER_BY_DEFAULT in hopper-variant.ts)
// unless ATTNLAB_FLASH_KERNEL=mma, or by ATTNLAB_FLASH_KERNEL=wgmma.
const choice = config().experimental.flashKernel;
const enabled = HOPPER_BY_DEFAULT ? choice !== 'mma' : choice === 'wgmma';
const skip = !cuda.ok
  ? `no CUDA device: ${cuda.reason}`
  : !hopper
    ? 'not a compute capability 9.x GPU'
    : enabled
      ? false
      : 'the Hopper kernel is off (run with ATTNLAB_FLASH_KERNEL=wgmma)';
const seed = Number(process.env.ATTNLAB_TEST_SEED ?? Date.now() % 1_000_000_000);

// Each case has more than 64 GQA-packed rows per kv head: smaller dense problems take the decode
// kernel (decode.ts) before the Hopper rule is asked.
const HOPPER_CASES: readonly AttentionCase[] = [
  { name: 'T=S=300', shape: { B: 2, T: 300, S: 300, N: 2, K: 2, H: 0 } },
  { name: 'T=S=700 causal', shape: { B: 1, T: 700, S: 700, N: 2, K: 2, H: 0 }, options: { isCausal: true } },
  {
    name: 'GQA T=300 S=700 causal bottom-right',
    shape: { B: 1, T: 300, S: 700, N: 4, K: 2, H: 0 },
    options: { isCausal: true, causalAlignment: 'bottom_right' },
  },
  {
    name: 'MQA T=500 S=200 causal bottom-right (rows see nothing)',
    shape: { B: 1, T: 500, S: 200, N: 4, K: 1, H: 0 },
    options: { isCausal: true, causalAlignment: 'bottom_right' },
  },
  {
    name: 'padding lengths, a batch with no keys',
    shape: { B: 3, T: 200, S: 333, N: 2, K: 1, H: 0 },
    options: { querySeqLengths: [200, 77, 150], keyValueSeqLengths: [333, 129, 0], isCausal: true },
  },
  { name: 'T=129 S=65 GQA', shape: { B: 2, T: 129, S: 65, N: 4, K: 2, H: 0 } },
  {
    name: 'window [100,0] + padding lengths',
    shape: { B: 2, T: 400, S: 500, N: 2, K: 1, H: 0 },
    options: { localWindowSize: [100, 0], keyValueSeqLengths: [500, 230], querySeqLengths: [400, 310] },
  },
  {
    name: 'causal window [37,5] bottom-right T<S',
    shape: { B: 1, T: 300, S: 450, N: 2, K: 2, H: 0 },
    options: { isCausal: true, causalAlignment: 'bottom_right', localWindowSize: [37, 5] },
  },
  {
    name: 'bias (1,N,T,S) f32 + causal',
    shape: { B: 2, T: 200, S: 260, N: 2, K: 1, H: 0 },
    options: { isCausal: true },
    biasShape: [1, 2, 200, 260],
    biasDType: 'float32',
  },
  {
    name: 'bias (B,1,1,S) + mask (B,1,T,S) with fully masked rows',
    shape: { B: 2, T: 150, S: 190, N: 2, K: 2, H: 0 },
    biasShape: [2, 1, 1, 190],
    maskShape: [2, 1, 150, 190],
  },
];

/**
 * H=128 from T=8192 on takes the three-consumer tile (192 rows × 80 keys, hopper-variant.ts
 * D128_LONG). Short key sides keep the float64 reference cheap (T·S·N·H ≤ 2.2e9 multiply-adds).
 */
const LONG_T_CASES: readonly AttentionCase[] = [
  { name: 'T=8192 S=300 MQA', shape: { B: 1, T: 8192, S: 300, N: 2, K: 1, H: 128 } },
  {
    name: 'T=8200 S=520 causal, lengths, a batch with no keys',
    shape: { B: 2, T: 8200, S: 520, N: 1, K: 1, H: 128 },
    options: { isCausal: true, querySeqLengths: [8200, 5001], keyValueSeqLengths: [520, 0] },
  },
  {
    name: 'T=8192 S=400 GQA causal bottom-right (rows see nothing)',
    shape: { B: 1, T: 8192, S: 400, N: 2, K: 1, H: 128 },
    options: { isCausal: true, causalAlignment: 'bottom_right' },
  },
  {
    name: 'T=8192 S=200 mask (1,1,T,S) + window [50,50]',
    shape: { B: 1, T: 8192, S: 200, N: 1, K: 1, H: 128 },
    options: { localWindowSize: [50, 50] },
    maskShape: [1, 1, 8192, 200],
  },
];

/**
 * Enough query blocks × heads (≥ DYNAMIC_MIN_ITEMS, 264) for the dynamic persistent grid (hopper-variant.ts
 * hopperGridOrder): every block takes items from the work counter after its first. Short key sides
 * keep the float64 reference cheap (≤ 1.4e9 multiply-adds each); sequences of lengths 7 and with no
 * keys give items with nothing to do beside the longest ones.
 */
const DYNAMIC_CASES: readonly AttentionCase[] = [
  {
    name: 'D=128 T=2048 S=300 GQA causal, lengths, a batch with no keys (288 items)',
    shape: { B: 3, T: 2048, S: 300, N: 6, K: 2, H: 128 },
    options: { isCausal: true, querySeqLengths: [2048, 1500, 7], keyValueSeqLengths: [300, 0, 120] },
  },
  {
    name: 'D=64 T=1536 S=256 GQA 5:1 non-causal (320 items of 192 rows)',
    shape: { B: 2, T: 1536, S: 256, N: 20, K: 4, H: 64 },
  },
  {
    name: 'D=192 T=1024 S=160 MQA causal bottom-right (288 items)',
    shape: { B: 1, T: 1024, S: 160, N: 36, K: 1, H: 192 },
    options: { isCausal: true, causalAlignment: 'bottom_right' },
  },
];

/** Head dims that round up inside the kernel (columns past H read as TMA's zeros). */
const PADDED_HEAD_DIMS: ReadonlyArray<{ H: number; Hv?: number; cases: readonly number[] }> = [
  { H: 96, cases: [1, 2, 4, 7] },
  { H: 48, cases: [1, 3] },
  { H: 256, Hv: 232, cases: [2, 6] },
  { H: 120, Hv: 128, cases: [0, 4] },
  { H: 160, cases: [1, 2, 4, 8, 9] },
];

/**
 * Key and value head dims of different box counts (the kernel's Dk for Q/K, Dv for V/O): each case
 * list holds causal, GQA/MQA, padding (a batch with no keys), rows that see nothing, bias and mask.
 */
const MIXED_HEAD_DIMS: ReadonlyArray<{
  H: number;
  Hv: number;
  cases: readonly number[];
  fp16?: readonly number[];
}> = [
  { H: 192, Hv: 128, cases: HOPPER_CASES.map((_, i) => i), fp16: [2, 4, 9] },
  { H: 128, Hv: 64, cases: [0, 2, 4, 9] },
  { H: 256, Hv: 128, cases: [1, 3, 8] },
  { H: 64, Hv: 256, cases: [2, 4, 9] },
  { H: 160, Hv: 96, cases: [1, 4, 6] },
];

/** The NaN tests' head dims: the first H=128 kernel, D=192, and key/value dims of their own. */
const NAN_HEAD_DIMS: ReadonlyArray<readonly [number, number]> = [
  [128, 128],
  [192, 192],
  [192, 128],
];

function withHeadDims(c: AttentionCase, H: number, Hv = H): AttentionCase {
  return { ...c, shape: { ...c.shape, H, Hv } };
}

/** One test: `c` runs on the Hopper kernel (variant `….wgmma`) and matches the float64 oracle. */
function itRunsOnTheKernel(label: string, c: AttentionCase, dtype: FloatDType, seedOffset: number) {
  it(`${label} ${c.name} (${dtype})`, () => {
    const caseSeed = seed + seedOffset;
    const { result, inputs } = run(c, dtype, caseSeed);
    assert.match(result.variant, /\.wgmma$/, `${c.name}: ran ${result.variant}`);
    assertMatchesOracle(result, inputs, dtype, `${label} ${c.name} (seed ${caseSeed}, ${result.variant})`);
  });
}

function run(c: AttentionCase, dtype: FloatDType, caseSeed: number) {
  const { q, k, v, options } = buildInputs(c, dtype, caseSeed);
  const result = attention(q.to('cuda'), k.to('cuda'), v.to('cuda'), {
    ...options,
    bias: options.bias?.to('cuda'),
    mask: options.mask?.to('cuda'),
    implementation: 'flash',
    returnLogSumExp: true,
  });
  return { result, inputs: { q, k, v, options } };
}

/** A bf16 tensor of shape (B, S, K, H) with every row at or past `from` of batch 0 set to NaN. */
function nanPastLength(t: Tensor, from: number): Tensor {
  const [, S, K, H] = t.shape;
  const bits = new Uint16Array(t.data as Uint16Array);
  bits.fill(0x7fc0, from * K * H, S * K * H);
  return Tensor.fromRaw(bits, t.shape, t.dtype);
}

describe('cuda flash: the Hopper kernel', { skip }, () => {
  before(() => {
    console.log(`# seed ${seed} (ATTNLAB_TEST_SEED=${seed} replays this run)`);
    setAllocationPoison(0xff);
  });
  after(() => setAllocationPoison(null));

  for (const H of [64, 128, 192, 256]) {
    for (const dtype of ['bfloat16', 'float16'] as const) {
      HOPPER_CASES.forEach((base, index) => {
        itRunsOnTheKernel(`H=${H}`, withHeadDims(base, H), dtype, 97 * index + H);
      });
    }
  }

  for (const { H, Hv, cases } of PADDED_HEAD_DIMS) {
    for (const index of cases) {
      const c = withHeadDims(HOPPER_CASES[index], H, Hv);
      itRunsOnTheKernel(`H=${H} Hv=${Hv ?? H} (padded in the kernel)`, c, 'bfloat16', 31 * index + H);
    }
  }

  for (const { H, Hv, cases, fp16 = [] } of MIXED_HEAD_DIMS) {
    const runs = [
      ...cases.map((index) => [index, 'bfloat16'] as const),
      ...fp16.map((index) => [index, 'float16'] as const),
    ];
    for (const [index, dtype] of runs) {
      const c = withHeadDims(HOPPER_CASES[index], H, Hv);
      itRunsOnTheKernel(
        `H/Hv=${H}/${Hv} (key and value dims of their own)`,
        c,
        dtype,
        53 * index + H + 7 * Hv,
      );
    }
  }

  LONG_T_CASES.forEach((c, index) => {
    for (const dtype of index === 0 ? (['bfloat16', 'float16'] as const) : (['bfloat16'] as const)) {
      it(`H=128 long T: ${c.name} (${dtype})`, () => {
        const caseSeed = seed + 53 * index;
        const { result, inputs } = run(c, dtype, caseSeed);
        assert.match(result.variant, /\.d128\.192x80x4wg\..*\.wgmma$/, `${c.name}: ran ${result.variant}`);
        assertMatchesOracle(result, inputs, dtype, `${c.name} (seed ${caseSeed}, ${result.variant})`);
      });
    }
  });

  DYNAMIC_CASES.forEach((c, index) => {
    it(`dynamic grid: ${c.name}`, () => {
      const caseSeed = seed + 71 * index;
      const { result, inputs } = run(c, 'bfloat16', caseSeed);
      assert.match(result.variant, /\.dyn\..*\.wgmma$/, `${c.name}: ran ${result.variant}`);
      assertMatchesOracle(result, inputs, 'bfloat16', `${c.name} (seed ${caseSeed}, ${result.variant})`);
    });
  });

  it('gives bit-identical results on repeated runs', () => {
    const pairs = [
      [64, 64],
      [128, 128],
      [192, 192],
      [256, 256],
      [192, 128],
    ] as const;
    // DYNAMIC_CASES[0]: a second launch finds the work counter zeroed again (a stale count would
    // hand every block an index past the last item after its first).
    const more = [LONG_T_CASES[2], DYNAMIC_CASES[0]];
    for (const c of [...pairs.map(([H, Hv]) => withHeadDims(HOPPER_CASES[2], H, Hv)), ...more]) {
      const { H, Hv = H } = c.shape;
      const { q, k, v, options } = buildInputs(c, 'bfloat16', seed + H);
      const inputs = [q.to('cuda'), k.to('cuda'), v.to('cuda')] as const;
      const once = () => attention(...inputs, { ...options, implementation: 'flash', returnLogSumExp: true });
      const a = once();
      const b = once();
      assert.deepEqual(
        new Uint16Array(b.output.to('cpu').data as Uint16Array),
        new Uint16Array(a.output.to('cpu').data as Uint16Array),
        `H=${H} Hv=${Hv}`,
      );
      assert.deepEqual(
        b.logSumExp!.toFloat64Array(),
        a.logSumExp!.toFloat64Array(),
        `H=${H} Hv=${Hv} log-sum-exp`,
      );
    }
  });

  for (const [H, Hv] of NAN_HEAD_DIMS) {
    it(`keeps NaN in padded keys and values out of every row (H=${H} Hv=${Hv})`, () => {
      const B = 2,
        S = 300,
        kvLen = 170;
      const q = randomNormal([B, 128, 2, H], { seed: seed + 1, dtype: 'bfloat16' });
      const k = nanPastLength(randomNormal([B, S, 2, H], { seed: seed + 2, dtype: 'bfloat16' }), kvLen);
      const v = nanPastLength(randomNormal([B, S, 2, Hv], { seed: seed + 3, dtype: 'bfloat16' }), kvLen);
      const options = { keyValueSeqLengths: [kvLen, S] };
      const result = attention(q.to('cuda'), k.to('cuda'), v.to('cuda'), {
        ...options,
        implementation: 'flash',
        returnLogSumExp: true,
      });
      assert.match(result.variant, /\.wgmma$/);
      assertMatchesOracle(
        result,
        { q, k, v, options },
        'bfloat16',
        `NaN past kv length H=${H} Hv=${Hv} (seed ${seed})`,
      );
    });

    it(`makes a query row with a NaN come out NaN, and only that row (H=${H} Hv=${Hv})`, () => {
      const q = randomNormal([1, 96, 2, H], { seed: seed + 5, dtype: 'bfloat16' });
      const bits = new Uint16Array(q.data as Uint16Array);
      bits[(5 * 2 + 1) * H + 3] = 0x7fc0; // (t=5, n=1, h=3)
      const qNan = Tensor.fromRaw(bits, q.shape, 'bfloat16');
      const k = randomNormal([1, 96, 2, H], { seed: seed + 6, dtype: 'bfloat16' });
      const v = randomNormal([1, 96, 2, Hv], { seed: seed + 7, dtype: 'bfloat16' });
      const result = attention(qNan.to('cuda'), k.to('cuda'), v.to('cuda'), {
        implementation: 'flash',
        returnLogSumExp: true,
      });
      assert.match(result.variant, /\.wgmma$/);
      const out = result.output.toFloat64Array();
      const lse = result.logSumExp!.toFloat64Array();
      for (let t = 0; t < 96; t++) {
        for (let n = 0; n < 2; n++) {
          const row = out.subarray((t * 2 + n) * Hv, (t * 2 + n + 1) * Hv);
          const nan = t === 5 && n === 1;
          assert.equal(row.every(Number.isNaN), nan, `row t=${t} n=${n}`);
          assert.equal(row.some(Number.isNaN), nan, `row t=${t} n=${n}`);
          assert.equal(Number.isNaN(lse[t * 2 + n]), nan, `log-sum-exp t=${t} n=${n}`);
        }
      }
    });
  }

  it('runs the cases it does not cover on the mma.sync kernel', () => {
    for (const [H, Hv] of [
      [32, 32],
      [80, 80],
      [136, 136],
      [128, 72],
      [192, 40],
    ]) {
      const { result, inputs } = run(withHeadDims(HOPPER_CASES[0], H, Hv), 'bfloat16', seed);
      assert.doesNotMatch(result.variant, /wgmma/, `H=${H} Hv=${Hv}`);
      assertMatchesOracle(result, inputs, 'bfloat16', `H=${H} Hv=${Hv} on mma.sync (seed ${seed})`);
    }
  });
});
