/**
 * The decode suites' NaN-rule case (test/gpu/decode/flash.test.ts, tma.test.ts): two new tokens,
 * bottom-right causal with a window of [10, 0], so token 0 sees keys S−12…S−2 and token 1 sees S−11…S−1
 * — a key one row sees and the other does not — and the comparison with the reference that wants NaN
 * in exactly the elements the reference has it.
 */
import assert from 'node:assert/strict';
import type { AttentionOptions } from '../../src/backends/problem.js';

export const NAN_WINDOW_OPTIONS: AttentionOptions = {
  isCausal: true,
  causalAlignment: 'bottom_right',
  localWindowSize: [10, 0],
};

/** NaN where `expected` has NaN, else within `tolerance`; `where(i)` names element i in a failure. */
export function assertSameNaNs(
  got: Float64Array,
  expected: Float64Array,
  where: (i: number) => string,
  tolerance = 0.05,
): void {
  for (let i = 0; i < expected.length; i++) {
    assert.equal(Number.isNaN(got[i]), Number.isNaN(expected[i]), where(i));
    if (!Number.isNaN(expected[i]))
      assert.ok(Math.abs(got[i] - expected[i]) < tolerance, `${where(i)}: ${got[i]} vs ${expected[i]}`);
  }
}
