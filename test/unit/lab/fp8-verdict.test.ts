/** Section 10b's verdict line: it must follow the measured medians, whichever way they point. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { fp8Verdict } from '../../../src/lab/te.js';
import type { ResultRow } from '../../../src/results/schema.js';

function row(impl: string, T: number, median: number | null, hostMedian = median): ResultRow {
  const summary = (m: number) => ({ median: m, p10: m, p90: m, min: m, max: m, mean: m, count: 10 });
  return {
    sweep: 'fp8',
    source: 'attnlab',
    impl,
    label: impl,
    B: 4,
    T,
    S: T,
    N: 16,
    K: 16,
    H: 128,
    dtype: 'bfloat16',
    causal: true,
    flops: 1,
    ...(median === null
      ? { status: 'unsupported' as const, reason: 'cuDNN FP8 needs sm_90' }
      : {
          status: 'ok' as const,
          timing: {
            method: 'cuda-events' as const,
            ms: summary(median),
            hostMs: summary(hostMedian ?? median),
            firstCallMs: 1,
            warmup: 1,
            inputCopies: 1,
          },
        }),
  } as ResultRow;
}

describe('lab 10b fp8Verdict', () => {
  it('says FP8 wins where its median is lower, and by how much', () => {
    const text = fp8Verdict([row('te', 8192, 2.6), row('te-fp8', 8192, 1.8)]);
    assert.match(text, /T=8192/);
    assert.match(text, /1\.44× as fast as bf16/);
  });
  it('says FP8 loses where its median is higher, with both host times', () => {
    const text = fp8Verdict([row('te', 1024, 0.065, 0.061), row('te-fp8', 1024, 0.108, 0.106)]);
    assert.match(text, /1\.66× the bf16 time/);
    assert.match(text, /0\.106 ms vs 0\.0610 ms/);
  });
  it('names the reason when a row has no timing', () => {
    const text = fp8Verdict([row('te', 1024, 0.065), row('te-fp8', 1024, null)]);
    assert.match(text, /no comparison \(cuDNN FP8 needs sm_90\)/);
  });
});
