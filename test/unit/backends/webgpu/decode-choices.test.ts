/**
 * The decode kernel's timed choices (ForwardOverrides: two keys a pass, fewer invocations a key
 * row, other key chunks) against the float64 oracle on the device: decode steps and a speculative
 * step, causal and not, GQA 4:1, float16 and float32. Skips, saying why, where no WebGPU device opens.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { attention } from '../../../../src/api/attention.js';
import { validateAttention } from '../../../../src/api/validate.js';
import { type ForwardOverrides, runForward } from '../../../../src/backends/webgpu/forward.js';
import { randomNormal } from '../../../../src/tensor/random.js';
import { webgpuSkipReason } from '../../../support/webgpu.js';

const skip = await webgpuSkipReason();

describe('decode kernel choices', { skip: skip ?? false }, () => {
  const shapes = [
    { H: 32, S: 1000, T: 1, causal: false, dtype: 'float16' },
    { H: 32, S: 777, T: 3, causal: true, dtype: 'float16' },
    { H: 32, S: 300, T: 1, causal: false, dtype: 'float32' },
  ] as const;
  const choices: [string, ForwardOverrides, RegExp][] = [
    ['two keys a pass', { decodePairs: true }, /-decode-s\d+k2-/],
    ['two keys a pass, 5 chunks', { decodePairs: true, splits: 5 }, /-decode-s\d+k2-/],
    [
      // One key a pass where the loop is not written out (R·UK·E past 64: 8 rows at 2 lanes).
      'two keys a pass where written out, 2 invocations a key row',
      { decodePairs: true, decodeLanes: 2 },
      /-decode-s\d+(k2)?-.*-c2-/,
    ],
    ['1 invocation a key row', { decodeLanes: 1 }, /-decode-s\d+-.*-c1-/],
  ];
  for (const { H, S, T, causal, dtype } of shapes) {
    it(`B=2 T=${T} S=${S} N=8 K=2 H=${H} ${dtype}${causal ? ' causal' : ''}`, async () => {
      const q = randomNormal([2, T, 8, H], { seed: 1, dtype });
      const k = randomNormal([2, S, 2, H], { seed: 2, dtype });
      const v = randomNormal([2, S, 2, H], { seed: 3, dtype });
      const want = attention(q, k, v, {
        implementation: 'reference',
        isCausal: causal,
      }).output.toFloat64Array();
      const gpu = [q, k, v].map((t) => t.to('webgpu'));
      const problem = validateAttention(gpu[0], gpu[1], gpu[2], {
        implementation: 'webgpu',
        isCausal: causal,
      });
      // float16 outputs round to 2^-11 relative; float32 sums keep ~1e-6.
      const bound = dtype === 'float16' ? 2e-3 : 1e-5;
      for (const [name, overrides, key] of choices) {
        const r = runForward(problem, overrides);
        assert.match(r.variant ?? '', key, name);
        const got = await r.output.toFloat64ArrayAsync();
        let worst = 0;
        for (let i = 0; i < got.length; i++) {
          const d = Math.abs(got[i] - want[i]);
          if (!(d <= worst)) worst = d;
        }
        assert.ok(worst <= bound, `${name}: max error ${worst} (bound ${bound})`);
        r.output.dispose();
      }
      for (const t of gpu) t.dispose();
    });
  }
});
