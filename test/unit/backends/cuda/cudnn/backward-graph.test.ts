/**
 * cuDNN's composite backward graph, checked without cuDNN: the graph attnlab hands to cuDNN is
 * interpreted in float64 (test/support/cudnn-graph-eval.ts) and its dQ, dK, dV (and dBias) must be the
 * CPU reference backward's, for every case of the shared matrix the cuDNN backward accepts, with dQ
 * accumulated and written directly; the refused cases say why.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { attention } from '../../../../../src/api/attention.js';
import { validateBackward } from '../../../../../src/api/validate-backward.js';
import { describeSdpaBackward } from '../../../../../src/backends/cuda/cudnn/backward.js';
import { buildSdpaBackwardGraph } from '../../../../../src/backends/cuda/cudnn/sdpa-backward-graph.js';
import { buildInputs, CASES } from '../../../../../src/check/cases.js';
import { randomOutputGradient, referenceGradients } from '../../../../../src/check/gradients.js';
import type { Tensor } from '../../../../../src/tensor/tensor.js';
import { evaluateGraph, H200, maxError } from '../../../../support/cudnn-graph-eval.js';

/** Cases the cuDNN backward refuses (the forward runs them through device-side preparations). */
const REFUSED: Record<string, string> = {
  'causal T>S bottom-right (first rows see nothing)': 'sees no key',
  'bias (B,1,1,S)': 'broadcast over T or S',
  'mask (B,1,T,S) with a fully masked row': 'boolean mask',
  'padding + causal bottom-right + GQA': 'sees no key',
};

describe('cuDNN composite backward graph, interpreted in float64', () => {
  CASES.forEach((c, index) => {
    it(c.name, () => {
      const { q, k, v, options } = buildInputs(c, 'bfloat16', 300 + index);
      const dO = randomOutputGradient(q, v, 'bfloat16', 400 + index);
      const exact = (t: Tensor) => t.astype('float64');
      const bias = options.bias && exact(options.bias);
      const forward = attention(exact(q), exact(k), exact(v), {
        ...options,
        bias,
        implementation: 'reference',
        returnLogSumExp: true,
      });
      const lse = forward.logSumExp as Tensor;
      const p = validateBackward(q, k, v, forward.output.astype('bfloat16'), lse, dO, options);
      const refused = REFUSED[c.name];
      const d = describeSdpaBackward(p, H200);
      if (refused) {
        assert.ok(!d.ok && d.reason.includes(refused), d.ok ? 'accepted' : d.reason);
        return;
      }
      assert.ok(d.ok, d.ok ? '' : d.reason);
      const want = referenceGradients({ q, k, v, options, dO });
      for (const directDQ of [false, true]) {
        const spec = buildSdpaBackwardGraph({ ...d.features, directDQ });
        const memory = {
          query: p.query.toFloat64Array(),
          key: p.key.toFloat64Array(),
          value: p.value.toFloat64Array(),
          // O exactly (as float64) so that rowsum(dO∘O) matches the reference's Σ P·dP.
          output: forward.output.toFloat64Array(),
          stats: lse.toFloat64Array(),
          dOutput: p.dOutput.toFloat64Array(),
          bias: p.bias?.tensor.toFloat64Array(),
          seqLenQ: Float64Array.from(p.querySeqLengths ?? new Array(p.B).fill(p.T)),
          seqLenKv: Float64Array.from(p.keyValueSeqLengths ?? new Array(p.B).fill(p.S)),
        };
        const got = evaluateGraph(spec, { memory, scale: p.scale }).written;
        const pairs = [
          ['dQuery', got.dQuery, want.dQuery],
          ['dKey', got.dKey, want.dKey],
          ['dValue', got.dValue, want.dValue],
          ['dBias', got.dBias, want.dBias],
        ] as const;
        for (const [name, g, w] of pairs) {
          if (!w) continue;
          assert.ok(g, `${name} not written`);
          const error = maxError(g, w);
          // The float32 log-sum-exp (as cuDNN's Stats) limits P to ~1e-7 relative.
          assert.ok(error < 1e-5, `${name} (directDQ ${directDQ}) differs from the reference by ${error}`);
        }
      }
    });
  });
});
