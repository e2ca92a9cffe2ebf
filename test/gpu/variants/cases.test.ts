/**
 * The modifier cases of the correctness suite (src/check/variant-cases.ts) on the CUDA flash backend,
 * with the generated modifier functions compiled into its kernels: forward by the suite's rule in every
 * device precision, and the backward (attentionVjp, flash) by the gradient suite's rule in bfloat16, a
 * learned table's dCaptures against the float64 reference. A case the backend refuses is skipped with
 * its reason; so is everything where there is no GPU.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { attentionVjp } from '../../../src/api/backward.js';
import { cudaFlashBackend } from '../../../src/backends/cuda/flash/backend.js';
import { cudaAvailable } from '../../../src/backends/cuda/runtime/context.js';
import { buildInputs } from '../../../src/check/cases.js';
import {
  checkGradients,
  gradientValues,
  plainLowPrecisionGradients,
  randomOutputGradient,
  referenceGradients,
} from '../../../src/check/gradients.js';
import { VARIANT_CASES } from '../../../src/check/variant-cases.js';
import { UnsupportedError } from '../../../src/errors.js';
import type { Tensor } from '../../../src/tensor/tensor.js';
import { withCaptures } from '../../../src/variants/modifiers.js';
import { defineBackendSuite, seedLine, testSeed } from '../../support/backend-suite.js';

const cuda = cudaAvailable();
const skip = cuda.ok ? false : `no CUDA device: ${cuda.reason}`;

describe('CUDA flash, modifier cases', { skip }, () => {
  console.log(seedLine());
  defineBackendSuite(cudaFlashBackend, { cases: VARIANT_CASES });
});

describe('CUDA flash backward, modifier cases, bfloat16', { skip }, () => {
  VARIANT_CASES.forEach((c, index) => {
    it(`${c.name} · backward`, (t) => {
      const seed = testSeed + 16 * index;
      const host = buildInputs(c, 'bfloat16', seed);
      const dO = randomOutputGradient(host.q, host.v, 'bfloat16', seed + 7);
      const inputs = { ...host, dO };
      const reference = referenceGradients(inputs);
      const plain = plainLowPrecisionGradients(inputs, 'bfloat16');
      const up = (x: Tensor) => x.to('cuda');
      const mods = {
        scoreMod:
          typeof host.options.scoreMod === 'object'
            ? withCaptures(host.options.scoreMod, up)
            : host.options.scoreMod,
        maskMod:
          typeof host.options.maskMod === 'object'
            ? withCaptures(host.options.maskMod, up)
            : host.options.maskMod,
      };
      let grads: ReturnType<ReturnType<typeof attentionVjp>['backward']>;
      try {
        grads = attentionVjp(up(host.q), up(host.k), up(host.v), {
          ...host.options,
          ...mods,
          implementation: 'flash',
        }).backward(up(dO));
      } catch (error) {
        if (error instanceof UnsupportedError) {
          t.skip(error.message);
          return;
        }
        throw error;
      }
      for (const r of checkGradients(gradientValues(grads), reference, plain, 'bfloat16'))
        assert.ok(r.ok, r.message);
      const table = grads.dCaptures?.table;
      if (table) {
        const f64 = (x: Tensor) => x.toHost().astype('float64');
        const want = (() => {
          const { q, k, v, options } = host;
          return attentionVjp(f64(q), f64(k), f64(v), { ...options, implementation: 'reference' })
            .backward(f64(dO))
            .dCaptures?.table?.toFloat64Array();
        })();
        assert.ok(want);
        const got = table.toFloat64Array();
        const magnitude = want.reduce((m, x) => Math.max(m, Math.abs(x)), 1);
        const error = got.reduce((m, x, i) => Math.max(m, Math.abs(x - want[i])), 0);
        assert.ok(error <= 0.05 * magnitude, `dCaptures.table: max|err| ${error} vs magnitude ${magnitude}`);
      }
    });
  });
});
