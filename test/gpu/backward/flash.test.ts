/**
 * The fused CUDA flash backward beyond the shared gradient suite (test/gpu/backward/backends.test.ts runs it
 * over CASES, LONG_CASES and random cases): the deterministic pass is bitwise reproducible and agrees
 * with the atomic one, peak memory is O(T) (no (B,N,T,S) buffer, against naive's), the shared memory
 * the launcher asks for is what the compiled kernels state, NaN in Q, K or dO reaches exactly the
 * gradients the reference's does, a forced refusal says why and `auto` moves on. The "sanitize:"
 * tests are small runs of every kernel for compute-sanitizer (memcheck, racecheck):
 * `--test-name-pattern=sanitize`. Everything here runs on the dK/dV loop that the variant picks
 * (on sm_90a by default the Hopper one where it applies, i.e. H = 128 cases; ATTNLAB_FLASH_BWD_KERNEL=mma keeps mma.sync).
 * Skips without a GPU.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { attentionVjp } from '../../../src/api/backward.js';
import type { BackwardOptions } from '../../../src/backends/backward-problem.js';
import { flashBackwardModule } from '../../../src/backends/cuda/flash/sm80/backward.js';
import {
  FLASH_BACKWARD_TILES,
  type FlashBackwardVariant,
  flashBackwardSharedBytes,
  HOPPER_BACKWARD_HEAD_DIMS,
  HOPPER_BACKWARD_TILES,
  HOPPER_BACKWARD_WS_TILES,
} from '../../../src/backends/cuda/flash/sm80/backward-variant.js';
import { readModuleGlobal } from '../../../src/backends/cuda/runtime/compile.js';
import { cudaAvailable, targetArch } from '../../../src/backends/cuda/runtime/context.js';
import {
  memoryStats,
  resetPeakMemory,
  setAllocationPoison,
} from '../../../src/backends/cuda/runtime/memory.js';
import type { ProblemSize } from '../../../src/backends/problem.js';
import { referenceGradients } from '../../../src/check/gradients.js';
import { UnsupportedError } from '../../../src/errors.js';
import type { FloatDType } from '../../../src/tensor/dtype.js';
import { randomNormal } from '../../../src/tensor/random.js';
import { Tensor } from '../../../src/tensor/tensor.js';

const cuda = cudaAvailable();
const skip = cuda.ok ? false : `no CUDA device: ${cuda.reason}`;
const seed = Number(process.env.ATTNLAB_TEST_SEED ?? Date.now() % 1_000_000_000);

function inputs(s: ProblemSize, dtype: FloatDType, at: number) {
  const q = randomNormal([s.B, s.T, s.N, s.H], { seed: at, dtype });
  const k = randomNormal([s.B, s.S, s.K, s.H], { seed: at + 1, dtype });
  const v = randomNormal([s.B, s.S, s.K, s.H], { seed: at + 2, dtype });
  const dO = randomNormal([s.B, s.T, s.N, s.H], { seed: at + 3, dtype });
  return { q, k, v, dO };
}

const bits = (t: Tensor) => Buffer.from((t.toHost().data as Uint16Array).buffer);

describe('GPU flash backward', { skip }, () => {
  before(() => {
    console.log(`# backward/flash.test.ts seed ${seed} (ATTNLAB_TEST_SEED=${seed} replays it)`);
    setAllocationPoison(0xff);
  });
  after(() => setAllocationPoison(null));

  it('deterministic: bitwise identical twice, and within rounding of the atomic dQ', () => {
    const shape = { B: 2, T: 700, S: 900, N: 4, K: 2, H: 128 };
    const host = inputs(shape, 'bfloat16', seed);
    const [q, k, v, dO] = [host.q, host.k, host.v, host.dO].map((t) => t.to('cuda'));
    const options: BackwardOptions = {
      implementation: 'flash',
      isCausal: true,
      causalAlignment: 'bottom_right',
    };
    const f = attentionVjp(q, k, v, { ...options, deterministic: true });
    const a = f.backward(dO);
    const b = f.backward(dO);
    assert.match(a.variant, /^flash-bwd\..*\.det$/);
    for (const key of ['dQuery', 'dKey', 'dValue'] as const)
      assert.ok(bits(a[key]).equals(bits(b[key])), key);
    const atomic = attentionVjp(q, k, v, options).backward(dO);
    assert.doesNotMatch(atomic.variant, /\.det$/);
    // dK and dV come from the same loop in both: identical. dQ differs by the order of its float32 sums only.
    assert.ok(bits(a.dKey).equals(bits(atomic.dKey)) && bits(a.dValue).equals(bits(atomic.dValue)));
    const x = a.dQuery.toFloat64Array();
    const y = atomic.dQuery.toFloat64Array();
    let worst = 0;
    let largest = 0;
    for (let i = 0; i < x.length; i++) {
      worst = Math.max(worst, Math.abs(x[i] - y[i]));
      largest = Math.max(largest, Math.abs(x[i]));
    }
    assert.ok(worst <= 2 ** -7 * largest, `max |det − atomic| ${worst} against max |dQ| ${largest}`);
    for (const t of [
      q,
      k,
      v,
      dO,
      f.output,
      f.logSumExp,
      a.dQuery,
      a.dKey,
      a.dValue,
      b.dQuery,
      b.dKey,
      b.dValue,
    ])
      t.dispose();
  });

  it('peak memory is O(T): no (B,N,T,S) buffer, unlike naive', () => {
    const shape = { B: 1, T: 4096, S: 4096, N: 4, K: 4, H: 64 };
    const host = inputs(shape, 'bfloat16', seed + 10);
    const [q, k, v, dO] = [host.q, host.k, host.v, host.dO].map((t) => t.to('cuda'));
    const f = attentionVjp(q, k, v, { implementation: 'flash', isCausal: true });
    resetPeakMemory();
    const before = memoryStats().currentBytes;
    const g = f.backward(dO);
    const peak = memoryStats().peakBytes - before;
    const { B, T, S, N, H } = shape;
    // Gradients (3 × B·T·N·H·2) + dQ accumulator (B·T·N·H·4) + row statistics (2 × B·N·T·4), rounded by the pool.
    const linear = 3 * B * T * N * H * 2 + B * T * N * H * 4 + 2 * B * N * T * 4;
    assert.ok(peak < 2 * linear, `peak ${peak} B, linear terms ${linear} B`);
    assert.ok(
      peak < B * N * T * S * 2,
      `peak ${peak} B against one 16-bit (B,N,T,S) matrix ${B * N * T * S * 2} B`,
    );
    console.log(
      `# flash backward peak ${peak} B at B=1 T=S=4096 N=4 H=64 (naive: ≥ ${B * N * T * S * 12} B)`,
    );
    for (const t of [q, k, v, dO, f.output, f.logSumExp, g.dQuery, g.dKey, g.dValue]) t.dispose();
  });

  it('asks for the shared memory the compiled kernels state', () => {
    const wgmma = targetArch() === 'sm_90a';
    const kinds = [
      ...[64, 128].map((headDim) => ({ kernel: 'mma' as const, headDim, tiles: FLASH_BACKWARD_TILES })),
      ...(wgmma
        ? HOPPER_BACKWARD_HEAD_DIMS.flatMap((headDim) => [
            { kernel: 'wgmma' as const, headDim, tiles: HOPPER_BACKWARD_TILES },
            { kernel: 'wgmma-ws' as const, headDim, tiles: HOPPER_BACKWARD_WS_TILES },
          ])
        : []),
    ];
    for (const { kernel, headDim, tiles } of kinds) {
      for (const dtype of ['bfloat16', 'float16'] as const) {
        const variant: FlashBackwardVariant = {
          kernel,
          arch: targetArch(),
          dtype,
          headDim,
          tiles,
          deterministic: false,
        };
        const module = flashBackwardModule(variant);
        const stated = (name: string) =>
          new DataView(readModuleGlobal(module, `attnlab_flash_bwd_${name}_shared_bytes`).buffer).getUint32(
            0,
            true,
          );
        const want = flashBackwardSharedBytes(variant);
        assert.deepEqual(
          { dkdv: stated('dkdv'), dkdvOnly: stated('dkdv_only'), dq: stated('dq') },
          want,
          `${kernel} D=${headDim} ${dtype}`,
        );
      }
    }
  });

  // Each case poisons elements (flat index into q, k or dO) and must give exactly the reference's NaN
  // pattern in every gradient: a non-finite Q, K or dO element must not reach the rows or keys that
  // do not see it through the zero weights of the tensor-core products (0·NaN). Shapes at H = 64 and
  // H = 128 (the Hopper loop's head dim).
  const NAN_CASES: ReadonlyArray<[string, BackwardOptions, Array<['q' | 'k' | 'dO', number]>]> = [
    // Row 70 of head 1 (q index (t·N + n)·H + h); key 270, past keyValueSeqLengths = 250.
    [
      'a query row, and a key behind the padding',
      { keyValueSeqLengths: [250] },
      [
        ['q', (70 * 2 + 1) * 64 + 5],
        ['k', 270 * 64 + 9],
      ],
    ],
    // Causal: key 100 is seen by rows ≥ 100 only, query row 20 sees keys 0..20 only.
    [
      'a key and a query row behind the causal mask',
      { isCausal: true },
      [
        ['k', 100 * 64 + 3],
        ['q', 20 * 2 * 64 + 7],
      ],
    ],
    // Causal: dO of row 10 (head 0) reaches dV of keys 0..10 only (column 3), not the rest of their
    // 128-key block; dO of row 140 (head 1), column 60, past the diagonal of keys 141.. .
    [
      'dO of a row behind the causal mask of most of its key block',
      { isCausal: true },
      [
        ['dO', 10 * 2 * 64 + 3],
        ['dO', (140 * 2 + 1) * 64 + 60],
      ],
    ],
  ];
  for (const [name, options, poison] of NAN_CASES)
    for (const H of [64, 128]) {
      it(`NaN in ${name}, H=${H}: exactly the reference's NaN gradients`, () => {
        const shape = { B: 1, T: 150, S: 300, N: 2, K: 1, H };
        const host = inputs(shape, 'bfloat16', seed + 20);
        const values = {
          q: host.q.toFloat64Array(),
          k: host.k.toFloat64Array(),
          dO: host.dO.toFloat64Array(),
        };
        // Indices are written for H = 64: (row · heads + head) · 64 + column keeps its meaning at H = 128.
        for (const [operand, at] of poison) values[operand][Math.floor(at / 64) * H + (at % 64)] = Number.NaN;
        const q = Tensor.fromArray(values.q, host.q.shape, 'bfloat16');
        const k = Tensor.fromArray(values.k, host.k.shape, 'bfloat16');
        const dO = Tensor.fromArray(values.dO, host.dO.shape, 'bfloat16');
        const reference = referenceGradients({ q, k, v: host.v, options, dO });
        const [cq, ck, cv, cdO] = [q, k, host.v, dO].map((t) => t.to('cuda'));
        for (const deterministic of [false, true]) {
          const f = attentionVjp(cq, ck, cv, { ...options, implementation: 'flash', deterministic });
          const g = f.backward(cdO);
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
              `${key} deterministic=${deterministic}: ${mismatches} elements differ in NaN-ness from the reference's (${nan} NaN of ${want.length}), first at ${first}`,
            );
            g[key].dispose();
          }
          f.output.dispose();
          f.logSumExp.dispose();
        }
        for (const t of [cq, ck, cv, cdO]) t.dispose();
      });
    }

  it('forced on a deterministic broadcast bias: UnsupportedError with the reason; auto gives it to another backend', () => {
    const host = inputs({ B: 2, T: 64, S: 64, N: 2, K: 2, H: 64 }, 'bfloat16', seed + 30);
    const [q, k, v, dO] = [host.q, host.k, host.v, host.dO].map((t) => t.to('cuda'));
    // Broadcast over the batch: each dBias element sums 2 positions, by float32 reductions.
    const bias = Tensor.zeros([1, 2, 64, 64], 'bfloat16').to('cuda');
    const f = attentionVjp(q, k, v, { implementation: 'flash', bias, deterministic: true });
    assert.throws(
      () => f.backward(dO),
      (e: unknown) => e instanceof UnsupportedError && /deterministic with a bias broadcast/.test(e.reason),
    );
    const auto = attentionVjp(q, k, v, { bias, deterministic: true }).backward(dO);
    assert.notEqual(auto.backend, 'flash');
    for (const t of [
      q,
      k,
      v,
      dO,
      bias,
      f.output,
      f.logSumExp,
      auto.dQuery,
      auto.dKey,
      auto.dValue,
      auto.dBias,
    ])
      t?.dispose();
  });

  // Small runs of every kernel and both dQ paths for compute-sanitizer, checked against naive.
  const SANITIZE: ReadonlyArray<[string, ProblemSize, BackwardOptions]> = [
    ['MHA causal H=128', { B: 1, T: 200, S: 200, N: 2, K: 2, H: 128 }, { isCausal: true }],
    [
      'GQA window + padding H=64',
      { B: 2, T: 130, S: 170, N: 4, K: 2, H: 64 },
      { localWindowSize: [50, 20], querySeqLengths: [130, 70], keyValueSeqLengths: [90, 170] },
    ],
    [
      'MQA bottom-right H=96',
      { B: 1, T: 90, S: 260, N: 2, K: 1, H: 96 },
      { isCausal: true, causalAlignment: 'bottom_right' },
    ],
  ];
  for (const [name, shape, options] of SANITIZE) {
    for (const deterministic of [false, true]) {
      it(`sanitize: ${name}${deterministic ? ' deterministic' : ''}`, () => {
        const host = inputs(shape, 'float16', seed + 40);
        const [q, k, v, dO] = [host.q, host.k, host.v, host.dO].map((t) => t.to('cuda'));
        const g = attentionVjp(q, k, v, { ...options, implementation: 'flash', deterministic }).backward(dO);
        const n = attentionVjp(q, k, v, { ...options, implementation: 'naive' }).backward(dO);
        for (const key of ['dQuery', 'dKey', 'dValue'] as const) {
          const x = g[key].toFloat64Array();
          const y = n[key].toFloat64Array();
          const scale = y.reduce((m, e) => Math.max(m, Math.abs(e)), 1);
          const worst = x.reduce((m, e, i) => Math.max(m, Math.abs(e - y[i])), 0);
          assert.ok(worst <= 0.02 * scale, `${key}: max |flash − naive| ${worst}, max |naive| ${scale}`);
        }
        for (const t of [q, k, v, dO, g.dQuery, g.dKey, g.dValue, n.dQuery, n.dKey, n.dValue]) t.dispose();
      });
    }
  }
});
