/**
 * `--settle-ms 0` is in the option's range, and the GPU rows (and peers' rows) it makes say `settleCalls: 0`:
 * the results reader takes that row, so the save after the run does not fail on attnlab's own output.
 */
import assert from 'node:assert/strict';
import { it } from 'node:test';
import { invalidRowReason } from '../../../src/results/validate.js';

const summary = { median: 1, mean: 1, min: 1, max: 1, p10: 1, p90: 1, count: 3 };
const row = (settleCalls: number) => ({
  sweep: 'bench',
  source: 'attnlab',
  impl: 'flash',
  label: 'attnlab flash bf16',
  B: 1,
  T: 16,
  S: 16,
  N: 2,
  K: 2,
  H: 16,
  dtype: 'bfloat16',
  causal: false,
  status: 'ok',
  flops: 32768,
  tflops: 32768 / 1e-3 / 1e12,
  peakMemoryBytes: null,
  maxError: 0.003,
  errorCheck: 'full',
  variant: 'flash-mma',
  timing: { method: 'cuda-events', ms: summary, firstCallMs: 5, warmup: 0, inputCopies: 1, settleCalls },
});

it('settleCalls 0 is a valid row; a negative or fractional count is not', () => {
  assert.equal(invalidRowReason(row(0), null), null);
  assert.equal(invalidRowReason(row(84), null), null);
  for (const bad of [-1, 2.5])
    assert.match(invalidRowReason(row(bad), null) ?? '', /settleCalls: expected an integer ≥ 0/);
});
