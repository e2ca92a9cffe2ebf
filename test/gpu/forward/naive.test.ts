/**
 * The naive CUDA backend through the correctness suite (src/check/suite.ts, run by
 * test/support/backend-suite.ts): every case in float32 (exact and TF32), float16 and bfloat16,
 * output and log-sum-exp, against the float64 reference with FlashAttention's rule
 * (src/check/accuracy.ts documents the terms per precision). Fresh random inputs per run (the seed is
 * printed; ATTNLAB_TEST_SEED replays one) and poisoned device memory: every block the pool hands out
 * is 0xFF-filled (NaN), so an element the backend forgot to write fails the comparison.
 *
 * Also: 10,000 calls hold device memory flat and plan nothing new; the (B,N,T,S) scores show in
 * peak memory. Skips, with the reason, where there is no GPU.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { attention } from '../../../src/api/attention.js';
import { cudaNaiveBackend } from '../../../src/backends/cuda/naive/backend.js';
import { cudaAvailable } from '../../../src/backends/cuda/runtime/context.js';
import { matmulPlanBuilds } from '../../../src/backends/cuda/runtime/matmul.js';
import {
  memoryStats,
  resetPeakMemory,
  setAllocationPoison,
} from '../../../src/backends/cuda/runtime/memory.js';
import { maxAbsDiff } from '../../../src/check/accuracy.js';
import { randomNormal } from '../../../src/tensor/random.js';
import { defineBackendSuite, testSeed as seed, seedLine } from '../../support/backend-suite.js';

const cuda = cudaAvailable();
const skip = cuda.ok ? false : `no CUDA device: ${cuda.reason}`;

describe('naive CUDA attention', { skip }, () => {
  before(() => {
    console.log(seedLine());
    setAllocationPoison(0xff);
  });
  after(() => setAllocationPoison(null));

  defineBackendSuite(cudaNaiveBackend, {
    expect: (row) => assert.match(row.variant ?? '', /^naive-cublaslt-/),
  });

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
