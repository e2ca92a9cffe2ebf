/**
 * Checking a GPU backend's result against the float64 CPU reference, shared by the GPU suites: the
 * oracle computed from exactly the kernel's input values, FlashAttention's tolerance rule on the
 * output (tolerance.ts), and the log-sum-exp within a relative bound.
 */
import assert from 'node:assert/strict';
import { attention } from '../../src/api/attention.js';
import type { AttentionOptions, AttentionResult } from '../../src/backends/problem.js';
import type { FloatDType } from '../../src/tensor/dtype.js';
import type { Tensor } from '../../src/tensor/tensor.js';
import { checkAccuracy, plainLowPrecision } from './tolerance.js';

/** Output and log-sum-exp by the CPU reference in float64, from the same (rounded) input values. */
export function float64Oracle(q: Tensor, k: Tensor, v: Tensor, options: AttentionOptions): AttentionResult {
  return attention(q.astype('float64'), k.astype('float64'), v.astype('float64'), {
    ...options,
    bias: options.bias?.astype('float64'),
    implementation: 'reference',
    returnLogSumExp: true,
  });
}

/** Every log-sum-exp within `tolerance` (relative, at least 1 in the denominator); −inf where expected. */
export function checkLogSumExp(actual: Tensor, expected: Tensor, label: string, tolerance: number): void {
  const a = actual.toFloat64Array();
  const e = expected.toFloat64Array();
  let worst = 0;
  for (let i = 0; i < e.length; i++) {
    if (e[i] === Number.NEGATIVE_INFINITY || a[i] === Number.NEGATIVE_INFINITY) {
      assert.equal(a[i], e[i], `${label}: log-sum-exp[${i}] expected ${e[i]}, got ${a[i]}`);
      continue;
    }
    const err = Math.abs(a[i] - e[i]) / Math.max(1, Math.abs(e[i]));
    assert.ok(Number.isFinite(err), `${label}: log-sum-exp[${i}] = ${a[i]}`);
    worst = Math.max(worst, err);
  }
  assert.ok(
    worst <= tolerance,
    `${label}: log-sum-exp relative error ${worst.toExponential(3)} > ${tolerance}`,
  );
}

/**
 * A GPU result (with its log-sum-exp) against the oracle of inputs `q`, `k`, `v` (host tensors of
 * `dtype`) and `options`; disposes the result's tensors.
 */
export function checkAgainstOracle(
  result: Pick<AttentionResult, 'output' | 'logSumExp'>,
  inputs: { q: Tensor; k: Tensor; v: Tensor; options: AttentionOptions },
  dtype: FloatDType,
  label: string,
  logSumExpTolerance: number,
): void {
  const { q, k, v, options } = inputs;
  const oracle = float64Oracle(q, k, v, options);
  const plain = plainLowPrecision(q, k, v, options, dtype);
  const report = checkAccuracy(result.output.toFloat64Array(), oracle.output.toFloat64Array(), plain, dtype);
  assert.ok(report.ok, `${label}: ${report.message}`);
  checkLogSumExp(result.logSumExp!, oracle.logSumExp!, label, logSumExpTolerance);
  result.output.dispose();
  result.logSumExp?.dispose();
}
