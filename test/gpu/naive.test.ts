/**
 * The naive CUDA backend against the float64 CPU reference: the shared correctness matrix plus a few
 * naive-specific cases, in float32 (exact and TF32), float16 and bfloat16, output and log-sum-exp,
 * with FlashAttention's accuracy rule (test/support/tolerance.ts documents the terms per dtype).
 * Fresh random inputs per run (the seed is printed; ATTNLAB_TEST_SEED replays one) and poisoned
 * device memory: every block the pool hands out is 0xFF-filled (NaN), so an element the backend
 * forgot to write fails the comparison.
 *
 * Also: 10,000 calls hold device memory flat and plan nothing new; the (B,N,T,S) scores show in
 * peak memory. Skips, with the reason, where there is no GPU.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { attention } from '../../src/api/attention.js';
import { cudaAvailable } from '../../src/backends/cuda/context.js';
import { matmulPlanBuilds } from '../../src/backends/cuda/matmul.js';
import { memoryStats, resetPeakMemory, setAllocationPoison } from '../../src/backends/cuda/memory.js';
import type { AttentionOptions } from '../../src/backends/problem.js';
import type { FloatDType } from '../../src/tensor/dtype.js';
import { randomNormal } from '../../src/tensor/random.js';
import type { Tensor } from '../../src/tensor/tensor.js';
import { type AttentionCase, buildInputs, CASES } from '../support/cases.js';
import { checkAccuracy, maxAbsDiff, plainLowPrecision } from '../support/tolerance.js';

const cuda = cudaAvailable();
const skip = cuda.ok ? false : `no CUDA device: ${cuda.reason}`;
const seed = Number(process.env.ATTNLAB_TEST_SEED ?? Date.now() % 1_000_000_000);

const NAIVE_CASES: readonly AttentionCase[] = [
  { name: 'H=64 Hv=32 GQA', shape: { B: 2, T: 50, S: 77, N: 4, K: 2, H: 64, Hv: 32 } },
  {
    name: 'T=300 S=1100 causal bottom-right MQA',
    shape: { B: 1, T: 300, S: 1100, N: 4, K: 1, H: 64 },
    options: { isCausal: true, causalAlignment: 'bottom_right' },
  },
  { name: 'H=72 (ld not a multiple of 16 bytes in f16)', shape: { B: 2, T: 33, S: 41, N: 3, K: 3, H: 72 } },
  {
    name: 'bias (1,1,T,S) + mask (1,N,1,S) + window',
    shape: { B: 2, T: 40, S: 60, N: 2, K: 2, H: 32 },
    biasShape: [1, 1, 40, 60],
    maskShape: [1, 2, 1, 60],
    options: { localWindowSize: [10, 5] },
  },
];

/** float32 runs twice: exact ('highest') and on TF32 tensor cores, each with its own tolerance. */
const PRECISIONS: ReadonlyArray<{ dtype: FloatDType; float32Precision?: 'highest' | 'tf32'; label: string }> =
  [
    { dtype: 'float32', float32Precision: 'highest', label: 'float32' },
    { dtype: 'float32', float32Precision: 'tf32', label: 'tf32' },
    { dtype: 'float16', label: 'float16' },
    { dtype: 'bfloat16', label: 'bfloat16' },
  ];

/** Log-sum-exp tolerance: scores are float32 from the (rounded) inputs in every mode but TF32. */
const LSE_TOLERANCE: Record<string, number> = { float32: 1e-4, tf32: 3e-2, float16: 1e-3, bfloat16: 1e-3 };

function toCuda(options: AttentionOptions): AttentionOptions {
  return { ...options, bias: options.bias?.to('cuda'), mask: options.mask?.to('cuda') };
}

describe('naive CUDA attention', { skip }, () => {
  before(() => {
    console.log(`# naive.test.ts seed ${seed} (ATTNLAB_TEST_SEED=${seed} replays it)`);
    setAllocationPoison(0xff);
  });
  after(() => setAllocationPoison(null));

  for (const c of [...CASES, ...NAIVE_CASES]) {
    for (const mode of PRECISIONS) {
      it(`${c.name} · ${mode.label}`, () => {
        const { q, k, v, options } = buildInputs(c, mode.dtype, seed);
        const wide = (t: Tensor) => t.astype('float64');
        const reference = attention(wide(q), wide(k), wide(v), {
          ...options,
          bias: options.bias && wide(options.bias),
          implementation: 'reference',
          returnLogSumExp: true,
        });
        const plain = plainLowPrecision(q, k, v, options, mode.dtype);
        const device = toCuda(options);
        const [dq, dk, dv] = [q.to('cuda'), k.to('cuda'), v.to('cuda')];
        const result = attention(dq, dk, dv, {
          ...device,
          implementation: 'naive',
          returnLogSumExp: true,
          float32Precision: mode.float32Precision,
        });
        try {
          assert.equal(result.backend, 'naive');
          assert.match(result.variant, /^naive-cublaslt-/);
          assert.equal(result.output.dtype, mode.dtype);
          const report = checkAccuracy(
            result.output.toFloat64Array(),
            reference.output.toFloat64Array(),
            plain,
            mode.label as FloatDType | 'tf32',
          );
          assert.ok(report.ok, `${c.name} ${mode.label} (${result.variant}): ${report.message}`);
          const lseError = maxAbsDiff(
            result.logSumExp!.toFloat64Array(),
            reference.logSumExp!.toFloat64Array(),
          );
          assert.ok(
            lseError <= LSE_TOLERANCE[mode.label],
            `log-sum-exp max|err| ${lseError} > ${LSE_TOLERANCE[mode.label]}`,
          );
        } finally {
          for (const t of [dq, dk, dv, device.bias, device.mask, result.output, result.logSumExp])
            t?.dispose();
        }
      });
    }
  }

  it('unbatched (T,N,H) inputs give a (T,N,Hv) output', () => {
    const q = randomNormal([9, 2, 32], { seed, dtype: 'float16' });
    const k = randomNormal([11, 1, 32], { seed: seed + 1, dtype: 'float16' });
    const result = attention(q.to('cuda'), k.to('cuda'), k.to('cuda'), { implementation: 'naive' });
    assert.deepEqual(result.output.shape, [9, 2, 32]);
    const reference = attention(q.astype('float64'), k.astype('float64'), k.astype('float64'), {
      implementation: 'reference',
    });
    assert.ok(maxAbsDiff(result.output.toFloat64Array(), reference.output.toFloat64Array()) < 5e-3);
    result.output.dispose();
  });

  it('the (B,N,T,S) float32 scores show in peak memory', () => {
    const [B, T, N, H] = [2, 512, 4, 64];
    const q = randomNormal([B, T, N, H], { seed, dtype: 'bfloat16' }).to('cuda');
    resetPeakMemory();
    const before = memoryStats().currentBytes;
    const result = attention(q, q, q, { implementation: 'naive' });
    const peak = memoryStats().peakBytes - before;
    // float32 scores plus bfloat16 probabilities, both (B,N,T,S).
    assert.ok(peak >= B * N * T * T * (4 + 2), `peak ${peak} bytes`);
    result.output.dispose();
    q.dispose();
  });

  it('10,000 calls hold device memory flat and build no new matmul plan', () => {
    const [B, T, N, H] = [1, 16, 2, 32];
    const q = randomNormal([B, T, N, H], { seed, dtype: 'float16' }).to('cuda');
    const call = () => attention(q, q, q, { implementation: 'naive', isCausal: true, returnLogSumExp: true });
    for (let i = 0; i < 10; i++) {
      const r = call();
      r.output.dispose();
      r.logSumExp?.dispose();
    }
    const start = memoryStats();
    const plans = matmulPlanBuilds();
    const started = performance.now();
    for (let i = 0; i < 10_000; i++) {
      const r = call();
      r.output.dispose();
      r.logSumExp?.dispose();
    }
    const end = memoryStats();
    console.log(
      `# 10,000 naive calls: ${((performance.now() - started) / 10).toFixed(1)} µs each; ${JSON.stringify(end)}`,
    );
    assert.equal(end.currentBytes, start.currentBytes);
    assert.equal(end.reservedBytes, start.reservedBytes);
    assert.equal(end.driverAllocations, start.driverAllocations);
    assert.equal(matmulPlanBuilds(), plans);
    q.dispose();
  });
});
