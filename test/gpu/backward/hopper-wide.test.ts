/**
 * The wgmma backward past a head dim of 128 (hopper/bwd_dkdv_wide_sm90.cuh, ATTNLAB_FLASH_BWD_WIDE=1: 64-key
 * blocks whose two warpgroups each own half of dK's, dV's and dQ's columns; padded head dims 192 and 256)
 * against the float64 CPU reference with the backward accuracy rule (src/check/gradients.ts: each gradient's
 * error ≤ 2× a plain same-precision implementation's + a floor): T, S ∈ {128, 257, 1000} (whole, ragged and
 * many 64-row blocks), causal in both alignments, GQA/MQA, padding lengths with a window, H ≠ Hv (zero-filled
 * columns: 192/128, 128/256), H = 160 on the 192-column module, bf16 and fp16, deterministic mode (the dQ
 * adds in a fixed order of key blocks); every case asserts that the 64-key variant ran, on both forms of the
 * loop: ATTNLAB_FLASH_BWD_WIDE=1 (dQ's two passes one after the other), =pair (both in flight, `.pair`) and
 * =halves (that, and dV/dK over a warpgroup's own queries before the exchange, `.pair.halves`). The shared memory the
 * launcher asks for is what the module states. NaN in Q, K or dO gives exactly the reference's NaN pattern.
 * Deterministic mode is bitwise identical over 20 runs on heads with more key blocks than an H100 has SMs.
 * The `sanitize: ` cases are compute-sanitizer's (scripts/gpu-verify.sh, flash-backward-wide). Skips without
 * a GPU, and on GPUs other than sm_90a.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { attentionBackward, attentionVjp } from '../../../src/api/backward.js';
import type { BackwardOptions } from '../../../src/backends/backward-problem.js';
import { flashBackwardModule } from '../../../src/backends/cuda/flash/sm80/backward.js';
import {
  type FlashBackwardVariant,
  flashBackwardSharedBytes,
  HOPPER_BACKWARD_WIDE_HEAD_DIMS,
  HOPPER_BACKWARD_WIDE_TILES,
} from '../../../src/backends/cuda/flash/sm80/backward-variant.js';
import { readModuleGlobal } from '../../../src/backends/cuda/runtime/compile.js';
import { cudaAvailable, targetArch } from '../../../src/backends/cuda/runtime/context.js';
import { setAllocationPoison } from '../../../src/backends/cuda/runtime/memory.js';
import type { ProblemSize } from '../../../src/backends/problem.js';
import type { AttentionCase } from '../../../src/check/cases.js';
import { buildInputs } from '../../../src/check/cases.js';
import {
  checkGradients,
  type GradientValues,
  gradientValues,
  plainLowPrecisionGradients,
  randomOutputGradient,
  referenceGradients,
} from '../../../src/check/gradients.js';
import { reloadConfig } from '../../../src/config.js';
import type { FloatDType } from '../../../src/tensor/dtype.js';
import { Tensor } from '../../../src/tensor/tensor.js';

const cuda = cudaAvailable();
const arch = cuda.ok ? targetArch() : '';
const skip = !cuda.ok
  ? `no CUDA device: ${cuda.reason}`
  : arch !== 'sm_90a'
    ? `${arch}: the wgmma backward needs sm_90a`
    : false;
const seed = Number(process.env.ATTNLAB_TEST_SEED ?? Date.now() % 1_000_000_000);

interface WideCase extends AttentionCase {
  dtype: FloatDType;
  deterministic?: boolean;
}

const CASES: readonly WideCase[] = [
  { name: 'T=S=128 H=256', shape: { B: 2, T: 128, S: 128, N: 2, K: 2, H: 256 }, dtype: 'bfloat16' },
  { name: 'T=S=128 H=192', shape: { B: 2, T: 128, S: 128, N: 2, K: 2, H: 192 }, dtype: 'float16' },
  {
    name: 'T=257 S=257 H=256 causal',
    shape: { B: 1, T: 257, S: 257, N: 2, K: 2, H: 256 },
    dtype: 'bfloat16',
    options: { isCausal: true },
  },
  {
    name: 'T=257 S=257 H=192 causal',
    shape: { B: 1, T: 257, S: 257, N: 2, K: 2, H: 192 },
    dtype: 'bfloat16',
    options: { isCausal: true },
  },
  {
    name: 'T=257 S=1000 H=192 causal bottom-right',
    shape: { B: 1, T: 257, S: 1000, N: 2, K: 1, H: 192 },
    dtype: 'float16',
    options: { isCausal: true, causalAlignment: 'bottom_right' },
  },
  {
    name: 'T=1000 S=257 H=256 causal top-left',
    shape: { B: 1, T: 1000, S: 257, N: 1, K: 1, H: 256 },
    dtype: 'float16',
    options: { isCausal: true },
  },
  {
    name: 'T=1000 S=257 H=256 causal bottom-right',
    shape: { B: 1, T: 1000, S: 257, N: 1, K: 1, H: 256 },
    dtype: 'bfloat16',
    options: { isCausal: true, causalAlignment: 'bottom_right' },
  },
  {
    name: 'GQA N=8 K=2 T=257 S=257 H=256 causal',
    shape: { B: 1, T: 257, S: 257, N: 8, K: 2, H: 256 },
    dtype: 'bfloat16',
    options: { isCausal: true },
  },
  {
    name: 'MQA N=4 K=1 T=128 S=1000 H=192',
    shape: { B: 1, T: 128, S: 1000, N: 4, K: 1, H: 192 },
    dtype: 'bfloat16',
  },
  {
    name: 'T=257 S=300 H=256 padding lengths, window [64,16]',
    shape: { B: 2, T: 257, S: 300, N: 2, K: 2, H: 256 },
    dtype: 'bfloat16',
    options: { querySeqLengths: [257, 130], keyValueSeqLengths: [300, 129], localWindowSize: [64, 16] },
  },
  {
    name: 'T=257 S=300 H=192 padding lengths, window [64,16]',
    shape: { B: 2, T: 257, S: 300, N: 2, K: 2, H: 192 },
    dtype: 'float16',
    options: { querySeqLengths: [257, 130], keyValueSeqLengths: [300, 129], localWindowSize: [64, 16] },
  },
  {
    name: 'H=192 Hv=128 T=S=257',
    shape: { B: 1, T: 257, S: 257, N: 2, K: 2, H: 192, Hv: 128 },
    dtype: 'bfloat16',
  },
  {
    name: 'H=128 Hv=256 T=S=257 causal',
    shape: { B: 1, T: 257, S: 257, N: 2, K: 1, H: 128, Hv: 256 },
    dtype: 'bfloat16',
    options: { isCausal: true },
  },
  {
    name: 'H=160 T=S=257 causal (the 192-column module)',
    shape: { B: 1, T: 257, S: 257, N: 2, K: 1, H: 160 },
    dtype: 'bfloat16',
    options: { isCausal: true },
  },
  {
    name: 'deterministic T=S=257 H=256 causal GQA',
    shape: { B: 1, T: 257, S: 257, N: 4, K: 2, H: 256 },
    dtype: 'bfloat16',
    options: { isCausal: true },
    deterministic: true,
  },
  {
    name: 'deterministic T=S=1000 H=192',
    shape: { B: 1, T: 1000, S: 1000, N: 1, K: 1, H: 192 },
    dtype: 'float16',
    deterministic: true,
  },
  {
    name: 'deterministic T=257 S=300 H=256 padding lengths, window [64,16]',
    shape: { B: 2, T: 257, S: 300, N: 2, K: 2, H: 256 },
    dtype: 'bfloat16',
    options: { querySeqLengths: [257, 130], keyValueSeqLengths: [300, 129], localWindowSize: [64, 16] },
    deterministic: true,
  },
];

/**
 * Deterministic repeats: both key-block orders (ascending without a mask, descending under causal), heads
 * whose 64-key blocks outnumber the SMs (157 and 141: the grid queues some behind blocks that wait for
 * their turn), T > S bottom-right (rows that see no key).
 */
const REPEAT_CASES: readonly (WideCase & { shape: ProblemSize })[] = [
  {
    name: 'T=128 S=10000 H=256 (157 key blocks)',
    shape: { B: 1, T: 128, S: 10000, N: 1, K: 1, H: 256 },
    dtype: 'bfloat16',
  },
  {
    name: 'T=S=9000 H=192 causal (141 key blocks)',
    shape: { B: 1, T: 9000, S: 9000, N: 1, K: 1, H: 192 },
    dtype: 'float16',
    options: { isCausal: true },
  },
  {
    name: 'GQA N=4 K=2 T=2000 S=700 H=256 causal bottom-right',
    shape: { B: 1, T: 2000, S: 700, N: 4, K: 2, H: 256 },
    dtype: 'bfloat16',
    options: { isCausal: true, causalAlignment: 'bottom_right' },
  },
];
const REPEATS = 20;

/** The two forms of the loop (ATTNLAB_FLASH_BWD_WIDE), each test named by its value (`· wide=1`, `· wide=pair`). */
const LOOPS = ['1', 'pair', 'halves'] as const;
type Loop = (typeof LOOPS)[number];

/** The variant of the loop past 128: `….d192.64x64x8.wgmma[.pair][.det]` or `….d256…`. */
const variantOf = (loop: Loop) =>
  new RegExp(
    `\\.d(192|256)\\.64x64x8\\.wgmma${{ '1': '', pair: '\\.pair', halves: '\\.pair\\.halves' }[loop]}(\\.det)?$`,
  );

const summary: string[] = [];

function wideOn(loop: Loop = '1') {
  process.env.ATTNLAB_FLASH_BWD_WIDE = loop;
  reloadConfig();
}
function wideOff() {
  delete process.env.ATTNLAB_FLASH_BWD_WIDE;
  reloadConfig();
}

const bits = (t: Tensor) => Buffer.from((t.toHost().data as Uint16Array).buffer);

describe('GPU flash backward · wgmma past a head dim of 128', { skip }, () => {
  before(() => {
    console.log(`# backward/hopper-wide.test.ts seed ${seed} (ATTNLAB_TEST_SEED=${seed} replays it)`);
    setAllocationPoison(0xff);
    wideOn();
  });
  after(() => {
    setAllocationPoison(null);
    wideOff();
    console.log(summary.map((line) => `# ${line}`).join('\n'));
  });

  // The expected gradients of a case, computed once for both forms (the float64 oracle costs seconds).
  const expected = new Map<number, { reference: GradientValues; plain: GradientValues }>();
  CASES.forEach((c, index) => {
    for (const loop of LOOPS)
      it(`${c.name} · ${c.dtype}${c.deterministic ? ' · deterministic' : ''} · wide=${loop}`, () => {
        wideOn(loop);
        const { q, k, v, options } = buildInputs(c, c.dtype, seed + 31 * index);
        const dO = randomOutputGradient(q, v, c.dtype, seed + 31 * index + 7);
        const inputs = { q, k, v, options, dO };
        const [cq, ck, cv, cdO] = [q, k, v, dO].map((t) => t.to('cuda'));
        const f = attentionVjp(cq, ck, cv, {
          ...options,
          implementation: 'flash',
          deterministic: c.deterministic,
        });
        const grads = f.backward(cdO);
        try {
          assert.equal(grads.backend, 'flash');
          assert.match(grads.variant ?? '', variantOf(loop), `variant ${grads.variant}`);
          assert.equal(/\.det$/.test(grads.variant ?? ''), c.deterministic === true);
          let want = expected.get(index);
          if (!want) {
            want = {
              reference: referenceGradients(inputs),
              plain: plainLowPrecisionGradients(inputs, c.dtype),
            };
            expected.set(index, want);
          }
          const reports = checkGradients(gradientValues(grads), want.reference, want.plain, c.dtype);
          summary.push(
            `${c.name} ${c.dtype}: ${reports
              .map((r) => `${r.gradient} ${r.error.toExponential(1)}/${r.bound.toExponential(1)}`)
              .join(' ')} ${grads.variant}`,
          );
          for (const r of reports) assert.ok(r.ok, `${c.name} (${grads.variant}) ${r.message}`);
        } finally {
          for (const t of [cq, ck, cv, cdO, f.output, f.logSumExp, grads.dQuery, grads.dKey, grads.dValue])
            t.dispose();
        }
      });
  });

  it('asks for the shared memory the compiled kernels state (D = 192, 256; bf16, fp16; both forms)', () => {
    for (const headDim of HOPPER_BACKWARD_WIDE_HEAD_DIMS) {
      for (const [dtype, widePair, wideHalves] of [
        ['bfloat16', false, false],
        ['float16', false, false],
        ['bfloat16', true, false],
        ['float16', true, true],
      ] as const) {
        const variant: FlashBackwardVariant = {
          kernel: 'wgmma',
          arch: targetArch(),
          dtype,
          headDim,
          tiles: HOPPER_BACKWARD_WIDE_TILES,
          deterministic: false,
          widePair,
          wideHalves,
        };
        const module = flashBackwardModule(variant);
        const stated = (name: string) =>
          new DataView(readModuleGlobal(module, `attnlab_flash_bwd_${name}_shared_bytes`).buffer).getUint32(
            0,
            true,
          );
        const want = flashBackwardSharedBytes(variant);
        assert.deepEqual(
          { dkdv: stated('dkdv'), dkdvOnly: stated('dkdv_only') },
          { dkdv: want.dkdv, dkdvOnly: want.dkdvOnly },
          `D=${headDim} ${dtype}${widePair ? ' pair' : ''}${wideHalves ? ' halves' : ''}`,
        );
      }
    }
  });

  // A non-finite Q, K or dO element must not reach rows or keys that do not see it through the zero
  // weights of the tensor-core products (0·NaN); indices are (row · N + head) · H + column, N = 2.
  const NAN_CASES: ReadonlyArray<
    [string, BackwardOptions, (H: number) => Array<['q' | 'k' | 'dO', number]>]
  > = [
    [
      'a query row, and a key behind the padding',
      { keyValueSeqLengths: [250] },
      (H) => [
        ['q', (70 * 2 + 1) * H + 5],
        ['k', 270 * H + H - 9],
      ],
    ],
    [
      'a key and dO rows behind the causal mask (columns of both warpgroups)',
      { isCausal: true },
      (H) => [
        ['k', 100 * H + 3],
        ['dO', 10 * 2 * H + 3],
        ['dO', (140 * 2 + 1) * H + H - 4],
      ],
    ],
  ];
  for (const [name, options, poison] of NAN_CASES)
    for (const H of HOPPER_BACKWARD_WIDE_HEAD_DIMS) {
      it(`NaN in ${name}, H=${H}: exactly the reference's NaN gradients`, () => {
        const c: WideCase = { name, shape: { B: 1, T: 150, S: 300, N: 2, K: 1, H }, dtype: 'bfloat16' };
        const host = buildInputs(c, 'bfloat16', seed + 20);
        const hostDO = randomOutputGradient(host.q, host.v, 'bfloat16', seed + 21);
        const values = {
          q: host.q.toFloat64Array(),
          k: host.k.toFloat64Array(),
          dO: hostDO.toFloat64Array(),
        };
        for (const [operand, at] of poison(H)) values[operand][at] = Number.NaN;
        const q = Tensor.fromArray(values.q, host.q.shape, 'bfloat16');
        const k = Tensor.fromArray(values.k, host.k.shape, 'bfloat16');
        const dO = Tensor.fromArray(values.dO, hostDO.shape, 'bfloat16');
        const reference = referenceGradients({ q, k, v: host.v, options, dO });
        const [cq, ck, cv, cdO] = [q, k, host.v, dO].map((t) => t.to('cuda'));
        for (const [loop, deterministic] of [
          ['1', false],
          ['1', true],
          ['pair', false],
          ['halves', false],
        ] as const) {
          wideOn(loop);
          const f = attentionVjp(cq, ck, cv, { ...options, implementation: 'flash', deterministic });
          const g = f.backward(cdO);
          assert.match(g.variant ?? '', variantOf(loop), `variant ${g.variant}`);
          for (const key of ['dQuery', 'dKey', 'dValue'] as const) {
            const got = g[key].toFloat64Array();
            const want = reference[key] as Float64Array;
            let mismatches = 0;
            let first = -1;
            for (let i = 0; i < got.length; i++) {
              if (Number.isNaN(got[i]) !== Number.isNaN(want[i])) {
                mismatches++;
                if (first < 0) first = i;
              }
            }
            const nan = want.filter(Number.isNaN).length;
            assert.equal(
              mismatches,
              0,
              `${key} wide=${loop} deterministic=${deterministic}: ${mismatches} elements differ in NaN-ness from the reference's (${nan} NaN of ${want.length}), first at ${first}`,
            );
            g[key].dispose();
          }
          f.output.dispose();
          f.logSumExp.dispose();
        }
        for (const t of [cq, ck, cv, cdO]) t.dispose();
        wideOn();
      });
    }

  it('refuses a bias past a head dim of 128 by name when forced; auto gives it to another backend', () => {
    const c: WideCase = {
      name: 'bias',
      shape: { B: 1, T: 64, S: 64, N: 2, K: 2, H: 256 },
      dtype: 'bfloat16',
    };
    const host = buildInputs(c, 'bfloat16', seed + 50);
    const hostDO = randomOutputGradient(host.q, host.v, 'bfloat16', seed + 51);
    const [q, k, v, dO] = [host.q, host.k, host.v, hostDO].map((t) => t.to('cuda'));
    const bias = Tensor.zeros([1, 2, 64, 64], 'bfloat16').to('cuda');
    const f = attentionVjp(q, k, v, { bias });
    const owned: Array<Tensor | undefined | null> = [q, k, v, dO, bias, f.output, f.logSumExp];
    try {
      assert.throws(
        () => attentionBackward(q, k, v, f.output, f.logSumExp, dO, { bias, implementation: 'flash' }),
        /bias, a boolean mask/,
      );
      const auto = attentionBackward(q, k, v, f.output, f.logSumExp, dO, { bias });
      owned.push(auto.dQuery, auto.dKey, auto.dValue, auto.dBias);
      assert.notEqual(auto.backend, 'flash');
    } finally {
      for (const t of owned) t?.dispose();
    }
  });

  // Small runs for compute-sanitizer (memcheck, racecheck, synccheck), checked against naive.
  const SANITIZE: ReadonlyArray<[string, ProblemSize, BackwardOptions]> = [
    ['MHA causal H=256', { B: 1, T: 200, S: 200, N: 2, K: 2, H: 256 }, { isCausal: true }],
    [
      'GQA window + padding H=192',
      { B: 2, T: 130, S: 170, N: 4, K: 2, H: 192 },
      { localWindowSize: [50, 20], querySeqLengths: [130, 70], keyValueSeqLengths: [90, 170] },
    ],
  ];
  for (const [name, shape, options] of SANITIZE) {
    for (const [loop, deterministic] of [
      ['1', false],
      ['1', true],
      ['pair', false],
      ['pair', true],
      ['halves', false],
      ['halves', true],
    ] as const) {
      it(`sanitize: ${name}${deterministic ? ' deterministic' : ''} · wide=${loop}`, () => {
        wideOn(loop);
        const c: WideCase = { name, shape, dtype: 'float16', options };
        const host = buildInputs(c, 'float16', seed + 40);
        const hostDO = randomOutputGradient(host.q, host.v, 'float16', seed + 41);
        const [q, k, v, dO] = [host.q, host.k, host.v, hostDO].map((t) => t.to('cuda'));
        const f = attentionVjp(q, k, v, { ...host.options, implementation: 'flash', deterministic });
        const g = f.backward(dO);
        const n = attentionBackward(q, k, v, f.output, f.logSumExp, dO, {
          ...host.options,
          implementation: 'naive',
        });
        try {
          assert.match(g.variant ?? '', variantOf(loop), `variant ${g.variant}`);
          for (const key of ['dQuery', 'dKey', 'dValue'] as const) {
            const x = g[key].toFloat64Array();
            const y = n[key].toFloat64Array();
            const scale = y.reduce((m, e) => Math.max(m, Math.abs(e)), 1);
            const worst = x.reduce((m, e, i) => Math.max(m, Math.abs(e - y[i])), 0);
            assert.ok(worst <= 0.02 * scale, `${key}: max |flash − naive| ${worst}, max |naive| ${scale}`);
          }
        } finally {
          for (const t of [
            q,
            k,
            v,
            dO,
            f.output,
            f.logSumExp,
            g.dQuery,
            g.dKey,
            g.dValue,
            n.dQuery,
            n.dKey,
            n.dValue,
          ])
            t.dispose();
        }
      });
    }
  }
});

describe(`GPU flash backward · wgmma past 128 · deterministic, bitwise identical over ${REPEATS} runs`, {
  skip,
}, () => {
  before(() => {
    setAllocationPoison(0xff);
    wideOn();
  });
  after(() => {
    setAllocationPoison(null);
    wideOff();
  });

  REPEAT_CASES.forEach((c, index) => {
    for (const loop of LOOPS)
      it(`repeat · ${c.name} · ${c.dtype} · wide=${loop}`, () => {
        wideOn(loop);
        const { q, k, v, options } = buildInputs(c, c.dtype, seed + 97 * index);
        const dO = randomOutputGradient(q, v, c.dtype, seed + 97 * index + 7);
        const [cq, ck, cv, cdO] = [q, k, v, dO].map((t) => t.to('cuda'));
        const vjpOptions: BackwardOptions = { ...options, implementation: 'flash' };
        const f = attentionVjp(cq, ck, cv, { ...vjpOptions, deterministic: true });
        const owned: Tensor[] = [cq, ck, cv, cdO, f.output, f.logSumExp];
        try {
          const runs = [];
          for (let r = 0; r < REPEATS; r++) {
            const g = f.backward(cdO);
            owned.push(g.dQuery, g.dKey, g.dValue);
            runs.push(g);
          }
          const atomic = attentionBackward(cq, ck, cv, f.output, f.logSumExp, cdO, vjpOptions);
          owned.push(atomic.dQuery, atomic.dKey, atomic.dValue);
          assert.match(runs[0].variant ?? '', variantOf(loop), `variant ${runs[0].variant}`);
          assert.match(runs[0].variant ?? '', /\.det$/);
          assert.match(atomic.variant ?? '', variantOf(loop));
          assert.doesNotMatch(atomic.variant ?? '', /\.det$/);
          const first = {
            dQuery: bits(runs[0].dQuery),
            dKey: bits(runs[0].dKey),
            dValue: bits(runs[0].dValue),
          };
          runs.forEach((g, r) => {
            for (const key of ['dQuery', 'dKey', 'dValue'] as const)
              assert.ok(bits(g[key]).equals(first[key]), `run ${r}: ${key} differs from run 0`);
          });
          // dK and dV come from the same loop either way; dQ differs by the order of its float32 sums only.
          assert.ok(first.dKey.equals(bits(atomic.dKey)) && first.dValue.equals(bits(atomic.dValue)));
          const x = runs[0].dQuery.toFloat64Array();
          const y = atomic.dQuery.toFloat64Array();
          let worst = 0;
          let largest = 0;
          for (let i = 0; i < x.length; i++) {
            assert.ok(Number.isFinite(x[i]), `dQ[${i}] = ${x[i]}`);
            worst = Math.max(worst, Math.abs(x[i] - y[i]));
            largest = Math.max(largest, Math.abs(x[i]));
          }
          assert.ok(worst <= 2 ** -7 * largest, `max |det − atomic| ${worst} against max |dQ| ${largest}`);
        } finally {
          for (const t of owned) t.dispose();
        }
      });
  });
});
