/**
 * The NaN rule for gradients on the GPU backward backends (src/check/gradient-nan.ts): for every case
 * of the gradient NaN suite, each backend that takes it gives NaN, ±inf and finite gradient elements
 * exactly where the float64 reference does, the finite ones close to it. `naive` in float32 (what
 * `auto` takes for float32 on the GPU) and bfloat16, `cudnn` and `flash` in bfloat16; a backend that
 * refuses a case must refuse with UnsupportedError (listed at the end). Skips without a GPU.
 */
import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { attentionVjp } from '../../../src/api/backward.js';
import { cudaAvailable } from '../../../src/backends/cuda/runtime/context.js';
import type { Implementation } from '../../../src/backends/problem.js';
import {
  compareGradientNan,
  GRADIENT_NAN_CASES,
  gradientNanInputs,
} from '../../../src/check/gradient-nan.js';
import { type GradientValues, gradientValues, referenceGradients } from '../../../src/check/gradients.js';
import { UnsupportedError } from '../../../src/errors.js';
import type { FloatDType } from '../../../src/tensor/dtype.js';

const cuda = cudaAvailable();
const skip = cuda.ok ? false : `no CUDA device: ${cuda.reason}`;

const RUNS: ReadonlyArray<{ dtype: FloatDType; backends: Implementation[] }> = [
  { dtype: 'float32', backends: ['naive'] },
  { dtype: 'bfloat16', backends: ['naive', 'cudnn', 'flash'] },
];

const refused: string[] = [];
after(() => {
  if (!skip && refused.length > 0) console.log(refused.map((line) => `# refused: ${line}`).join('\n'));
});

for (const run of RUNS) {
  describe(`GPU backward NaN rule · ${run.dtype}`, { skip }, () => {
    GRADIENT_NAN_CASES.forEach((c, index) => {
      it(`${c.name} · ${run.dtype}`, () => {
        const inputs = gradientNanInputs(c, run.dtype, 500 + 10 * index);
        let reference: GradientValues | undefined;
        const { q, k, v, options, dO } = inputs;
        const device = { ...options, bias: options.bias?.to('cuda'), mask: options.mask?.to('cuda') };
        const [cq, ck, cv, cdO] = [q, k, v, dO].map((t) => t.to('cuda'));
        try {
          for (const implementation of run.backends) {
            let grads: ReturnType<ReturnType<typeof attentionVjp>['backward']>;
            let f: ReturnType<typeof attentionVjp> | undefined;
            try {
              f = attentionVjp(cq, ck, cv, { ...device, implementation });
              grads = f.backward(cdO);
            } catch (error) {
              f?.output.dispose();
              f?.logSumExp.dispose();
              assert.ok(error instanceof UnsupportedError, `${implementation}: ${error}`);
              refused.push(`${implementation} ${run.dtype} ${c.name}: ${error.reason}`);
              continue;
            }
            reference ??= referenceGradients(inputs);
            const r = compareGradientNan(gradientValues(grads), reference, run.dtype);
            assert.ok(r.ok, `${implementation} (${grads.variant}): ${r.message}`);
            for (const t of [f.output, f.logSumExp, grads.dQuery, grads.dKey, grads.dValue, grads.dBias])
              t?.dispose();
          }
        } finally {
          for (const t of [cq, ck, cv, cdO, device.bias, device.mask]) t?.dispose();
        }
      });
    });
  });
}
