/** Timing statistics: the quantile definition peers share (numpy's linear), and refusals of bad samples. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { median, quantile, summarize } from '../../../src/bench/stats.js';

describe('bench statistics', () => {
  it('median of odd and even counts, independent of order', () => {
    assert.equal(median([5, 1, 3]), 3);
    assert.equal(median([4, 1, 3, 2]), 2.5);
    assert.equal(median([7]), 7);
  });

  it('p10 and p90 interpolate between ranks as numpy.percentile does', () => {
    // numpy.percentile(range(1, 11), [10, 90]) == [1.9, 9.1]
    const samples = [10, 9, 8, 7, 6, 5, 4, 3, 2, 1];
    assert.ok(Math.abs(quantile(samples, 0.1) - 1.9) < 1e-12);
    assert.ok(Math.abs(quantile(samples, 0.9) - 9.1) < 1e-12);
    // numpy.percentile([1, 2, 3, 4, 100], 90) == 61.6: one outlier moves p90, not the median.
    const tail = summarize([1, 2, 3, 4, 100]);
    assert.ok(Math.abs(tail.p90 - 61.6) < 1e-12);
    assert.equal(tail.median, 3);
  });

  it('summarize reports min, max, mean and count', () => {
    const s = summarize([0.5, 0.25, 1]);
    assert.deepEqual({ min: s.min, max: s.max, count: s.count }, { min: 0.25, max: 1, count: 3 });
    assert.ok(Math.abs(s.mean - 0.5833333333333334) < 1e-15);
    assert.ok(s.p10 <= s.median && s.median <= s.p90);
  });

  it('refuses empty and non-finite samples, naming the bad index', () => {
    assert.throws(() => summarize([]), /samples: expected at least one sample, got none/);
    assert.throws(() => summarize([1, Number.NaN]), /samples\[1\]: expected a finite number, got NaN/);
    assert.throws(() => quantile([1, 2], 1.5), /q: expected a number in \[0, 1\]/);
  });
});
