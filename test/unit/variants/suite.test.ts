/**
 * The modifier cases of the correctness suite (src/check/variant-cases.ts) on the CPU: CPU flash forward
 * by the suite's rule against the float64 reference, and both CPU backward backends by the gradient
 * suite's rule (dCaptures of a learned table beside dQ, dK, dV), in float64 and bfloat16.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { attentionVjp } from '../../../src/api/backward.js';
import { cpuFlashBackend } from '../../../src/backends/cpu/flash.js';
import { buildInputs } from '../../../src/check/cases.js';
import {
  checkGradients,
  gradientValues,
  plainLowPrecisionGradients,
  randomOutputGradient,
  referenceGradients,
} from '../../../src/check/gradients.js';
import { PRECISIONS } from '../../../src/check/suite.js';
import { VARIANT_CASES } from '../../../src/check/variant-cases.js';
import type { FloatDType } from '../../../src/tensor/dtype.js';
import { defineBackendSuite } from '../../support/backend-suite.js';

describe('CPU flash, modifier cases', () => {
  defineBackendSuite(cpuFlashBackend, {
    cases: VARIANT_CASES,
    precisions: [PRECISIONS.float64, PRECISIONS.float32],
  });
});

for (const dtype of ['float64', 'bfloat16'] as FloatDType[]) {
  describe(`CPU backward, modifier cases, ${dtype}`, () => {
    VARIANT_CASES.forEach((c, index) => {
      it(c.name, () => {
        const seed = 500 + 10 * index;
        const { q, k, v, options } = buildInputs(c, dtype, seed);
        const dO = randomOutputGradient(q, v, dtype, seed + 7);
        const inputs = { q, k, v, options, dO };
        const reference = referenceGradients(inputs);
        const plain = plainLowPrecisionGradients(inputs, dtype);
        for (const implementation of ['flash', 'reference'] as const) {
          const g = attentionVjp(q, k, v, { ...options, implementation }).backward(dO);
          assert.equal(g.backend, implementation);
          for (const r of checkGradients(gradientValues(g), reference, plain, dtype))
            assert.ok(r.ok, `${implementation}: ${r.message}`);
          const learned =
            c.options?.scoreMod &&
            typeof c.options.scoreMod === 'object' &&
            c.options.scoreMod.captures.some((x) => x.learned);
          assert.equal(g.dCaptures !== undefined, Boolean(learned));
        }
      });
    });
  });
}
