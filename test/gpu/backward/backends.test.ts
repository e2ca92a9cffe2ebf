/**
 * The GPU backward backends (naive, cudnn, flash) against the float64 CPU reference over the forward's case
 * list (src/check/cases.ts), with the backward accuracy rule (src/check/gradients.ts): each gradient's
 * error ≤ 2× the plain same-precision implementation's + a floor. A case cuDNN refuses must refuse with
 * UnsupportedError and a reason. Poisoned device memory (0xFF = NaN) catches unwritten elements.
 * Fresh random inputs per run (the seed is printed; ATTNLAB_TEST_SEED replays one). Skips without a GPU.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { attentionVjp } from '../../../src/api/backward.js';
import { cudaAvailable } from '../../../src/backends/cuda/runtime/context.js';
import {
  memoryStats,
  resetPeakMemory,
  setAllocationPoison,
} from '../../../src/backends/cuda/runtime/memory.js';
import type { Implementation } from '../../../src/backends/problem.js';
import { type AttentionCase, buildInputs, CASES, LONG_CASES } from '../../../src/check/cases.js';
import { GRADIENT_CASES } from '../../../src/check/gradient-cases.js';
import {
  checkGradients,
  type GradientValues,
  gradientValues,
  plainLowPrecisionGradients,
  randomOutputGradient,
  referenceGradients,
} from '../../../src/check/gradients.js';
import { randomCases } from '../../../src/check/random-cases.js';
import { UnsupportedError } from '../../../src/errors.js';
import type { FloatDType } from '../../../src/tensor/dtype.js';
import { randomNormal } from '../../../src/tensor/random.js';
import type { Tensor } from '../../../src/tensor/tensor.js';

const cuda = cudaAvailable();
const skip = cuda.ok ? false : `no CUDA device: ${cuda.reason}`;
const seed = Number(process.env.ATTNLAB_TEST_SEED ?? Date.now() % 1_000_000_000);

// The fused flash backward runs apart (its rows are named "· flash…", so --test-name-pattern=flash
// selects them) and also over LONG_CASES: its tiles (128 keys × 64 queries per step, 128-row dQ
// blocks) need several-tile shapes for the causal/window/padding block ranges to be exercised; the
// deterministic dQ pass is a kernel of its own and gets runs of its own.
interface Run {
  dtype: FloatDType;
  backends: Implementation[];
  cases?: readonly AttentionCase[];
  deterministic?: boolean;
  /** Appended to the test names, so a pattern can select one run (e.g. `flash long`). */
  label?: string;
}
const RUNS: readonly Run[] = [
  { dtype: 'bfloat16', backends: ['naive', 'cudnn'] },
  { dtype: 'float16', backends: ['naive', 'cudnn'] },
  { dtype: 'float32', backends: ['naive'] },
  { dtype: 'float32', backends: ['naive'], cases: GRADIENT_CASES, label: 'gradient cases' },
  {
    dtype: 'bfloat16',
    backends: ['naive', 'cudnn', 'flash'],
    cases: GRADIENT_CASES,
    label: 'gradient cases',
  },
  { dtype: 'bfloat16', backends: ['flash'], cases: CASES, label: 'flash' },
  { dtype: 'float16', backends: ['flash'], cases: CASES, label: 'flash' },
  { dtype: 'bfloat16', backends: ['flash'], cases: LONG_CASES, label: 'flash long' },
  { dtype: 'float16', backends: ['flash'], cases: CASES, deterministic: true, label: 'flash deterministic' },
  {
    dtype: 'bfloat16',
    backends: ['flash'],
    cases: randomCases(12, seed % 1000),
    deterministic: true,
    label: 'flash random deterministic',
  },
];
const runLabel = (run: Run) => (run.label ? ` · ${run.label}` : '');

const summary: string[] = [];

// One top-level suite per run: node's reporter prints a top-level suite's results when it ends, so a
// run cut short (a device call's time limit) still reports the runs before it.
before(() => {
  if (skip) return;
  console.log(`# backward/backends.test.ts seed ${seed} (ATTNLAB_TEST_SEED=${seed} replays it)`);
  setAllocationPoison(0xff);
});
after(() => {
  if (skip) return;
  setAllocationPoison(null);
  console.log(summary.map((line) => `# ${line}`).join('\n'));
});

for (const run of RUNS) {
  describe(`GPU attention backward · ${run.dtype}${runLabel(run)}`, { skip }, () => {
    (run.cases ?? CASES).forEach((c, index) => {
      it(`${c.name} · ${run.dtype}${runLabel(run)}`, () => {
        const { q, k, v, options } = buildInputs(c, run.dtype, seed + 17 * index);
        const dO = randomOutputGradient(q, v, run.dtype, seed + 17 * index + 9);
        const inputs = { q, k, v, options, dO };
        // Computed on the first backend that runs the case (the float64 oracle costs seconds in JS).
        let expected: { reference: GradientValues; plain: GradientValues } | undefined;
        const want = () =>
          (expected ??= {
            reference: referenceGradients(inputs),
            plain: plainLowPrecisionGradients(inputs, run.dtype),
          });
        const device = { ...options, bias: options.bias?.to('cuda'), mask: options.mask?.to('cuda') };
        const [cq, ck, cv, cdO] = [q, k, v, dO].map((t) => t.to('cuda'));
        try {
          for (const implementation of run.backends) {
            let f: ReturnType<typeof attentionVjp>;
            try {
              f = attentionVjp(cq, ck, cv, { ...device, implementation, deterministic: run.deterministic });
            } catch (error) {
              assert.ok(error instanceof UnsupportedError, `${implementation}: ${error}`);
              summary.push(`${implementation} ${run.dtype} ${c.name}: refused (${error.reason})`);
              continue;
            }
            let grads: ReturnType<typeof f.backward>;
            try {
              grads = f.backward(cdO);
            } catch (error) {
              f.output.dispose();
              assert.ok(error instanceof UnsupportedError, `${implementation} backward: ${error}`);
              summary.push(`${implementation} ${run.dtype} ${c.name}: backward refused (${error.reason})`);
              continue;
            }
            assert.equal(grads.backend, implementation);
            const reports = checkGradients(gradientValues(grads), want().reference, want().plain, run.dtype);
            const worst = reports.map(
              (r) => `${r.gradient} ${r.error.toExponential(1)}/${r.bound.toExponential(1)}`,
            );
            summary.push(`${implementation} ${run.dtype} ${c.name}: ${worst.join(' ')} ${grads.variant}`);
            for (const r of reports)
              assert.ok(r.ok, `${implementation} ${c.name} (${grads.variant}) ${r.message}`);
            for (const t of [f.output, f.logSumExp, grads.dQuery, grads.dKey, grads.dValue, grads.dBias])
              t?.dispose();
          }
        } finally {
          for (const t of [cq, ck, cv, cdO, device.bias, device.mask]) t?.dispose();
        }
      });
    });
  });
}

describe('GPU attention backward', { skip }, () => {
  it('naive: bitwise identical twice, and the (B,N,T,S) matrices show in peak memory', () => {
    const [B, T, N, H] = [2, 512, 4, 64];
    const q = randomNormal([B, T, N, H], { seed, dtype: 'bfloat16' }).to('cuda');
    const dO = randomNormal([B, T, N, H], { seed: seed + 1, dtype: 'bfloat16' }).to('cuda');
    const f = attentionVjp(q, q, q, { implementation: 'naive', deterministic: true });
    resetPeakMemory();
    const before = memoryStats().currentBytes;
    const a = f.backward(dO);
    const peak = memoryStats().peakBytes - before;
    assert.ok(peak >= B * N * T * T * 12, `peak ${peak} bytes`);
    const b = f.backward(dO);
    const bits = (t: Tensor) => Buffer.from((t.toHost().data as Uint16Array).buffer);
    assert.ok(bits(a.dQuery).equals(bits(b.dQuery)) && bits(a.dKey).equals(bits(b.dKey)));
    for (const t of [q, dO, f.output, f.logSumExp, a.dQuery, a.dKey, a.dValue, b.dQuery, b.dKey, b.dValue])
      t.dispose();
  });

  it('cudnn refuses a boolean mask with UnsupportedError and the reason', () => {
    const q = randomNormal([1, 16, 2, 64], { seed, dtype: 'bfloat16' }).to('cuda');
    const mask = buildInputs(
      { name: 'm', shape: { B: 1, T: 16, S: 16, N: 2, K: 2, H: 64 }, maskShape: [1, 1, 16, 16] },
      'bfloat16',
      seed,
    ).options.mask!.to('cuda');
    assert.throws(
      () => attentionVjp(q, q, q, { implementation: 'cudnn', mask }).backward(q),
      (e: unknown) => e instanceof UnsupportedError && /mask/.test(e.reason),
    );
    q.dispose();
    mask.dispose();
  });
});
