/**
 * The peaked softmax (inputs ×10, src/check/gradient-cases.ts) on the GPU backward backends, in
 * bfloat16, with D = rowsum(dO∘O) from the rounded output (default) and from the float32 output
 * (`float32Output`): every gradient within the suite's bound; with the float32 output, CUDA flash's
 * dK and dQ errors are no larger than from the rounded one; cuDNN refuses a float32 output with
 * UnsupportedError. Then the cost of `float32Output` at B=2 T=S=2048 N=16 H=128 causal: the vjp's
 * forward and backward time (median of 5, after a warm-up) and peak memory, printed with the errors
 * (docs/guide/gradient-accuracy.md records them). Skips without a GPU.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { attentionVjp } from '../../../src/api/backward.js';
import { cudaAvailable, synchronize } from '../../../src/backends/cuda/runtime/context.js';
import { memoryStats, resetPeakMemory } from '../../../src/backends/cuda/runtime/memory.js';
import { PEAKED_CASES, PEAKED_FACTOR, scaledInputs } from '../../../src/check/gradient-cases.js';
import {
  checkGradients,
  gradientValues,
  plainLowPrecisionGradients,
  randomOutputGradient,
  referenceGradients,
} from '../../../src/check/gradients.js';
import { UnsupportedError } from '../../../src/errors.js';
import { randomNormal } from '../../../src/tensor/random.js';
import type { Tensor } from '../../../src/tensor/tensor.js';

const cuda = cudaAvailable();
const skip = cuda.ok ? false : `no CUDA device: ${cuda.reason}`;

describe('GPU backward, peaked softmax bfloat16: D from the float32 output', { skip }, () => {
  PEAKED_CASES.forEach((c, index) => {
    it(c.name, () => {
      const { q, k, v, options } = scaledInputs(c, 'bfloat16', 700 + index, PEAKED_FACTOR);
      const dO = randomOutputGradient(q, v, 'bfloat16', 800 + index);
      const inputs = { q, k, v, options, dO };
      const reference = referenceGradients(inputs);
      const plain = plainLowPrecisionGradients(inputs, 'bfloat16');
      const [cq, ck, cv, cdO] = [q, k, v, dO].map((t) => t.to('cuda'));
      const errors: Record<string, Record<string, number>> = {};
      for (const implementation of ['flash', 'cudnn', 'naive'] as const)
        for (const deterministic of implementation === 'flash' ? [false, true] : [false])
          for (const float32Output of [false, true]) {
            const label = `${implementation}${deterministic ? ' deterministic' : ''} float32Output=${float32Output}`;
            let f: ReturnType<typeof attentionVjp> | undefined;
            let grads: ReturnType<ReturnType<typeof attentionVjp>['backward']>;
            try {
              f = attentionVjp(cq, ck, cv, { ...options, implementation, deterministic, float32Output });
              grads = f.backward(cdO);
            } catch (error) {
              // cuDNN refuses the float32 output (its graph reads O in the inputs' dtype); nothing else may refuse.
              assert.ok(
                error instanceof UnsupportedError && implementation === 'cudnn',
                `${label}: ${error}`,
              );
              console.log(`${c.name} · ${label}: refused (${error.reason})`);
              for (const t of [f?.output, f?.logSumExp, f?.float32Output]) t?.dispose();
              continue;
            }
            const reports = checkGradients(gradientValues(grads), reference, plain, 'bfloat16');
            for (const r of reports) assert.ok(r.ok, `${label} ${r.message}`);
            errors[label] = Object.fromEntries(reports.map((r) => [r.gradient, r.error]));
            console.log(
              `${c.name} · ${label}: ${reports.map((r) => `${r.gradient} ${r.error.toExponential(3)}`).join(' ')}`,
            );
            for (const t of [f.output, f.logSumExp, f.float32Output, grads.dQuery, grads.dKey, grads.dValue])
              t?.dispose();
          }
      assert.equal(errors['cudnn float32Output=true'], undefined, 'cuDNN took a float32 output');
      for (const label of ['flash', 'flash deterministic'])
        for (const g of ['dQuery', 'dKey']) {
          const [rounded, wide] = [
            errors[`${label} float32Output=false`][g],
            errors[`${label} float32Output=true`][g],
          ];
          assert.ok(wide <= rounded, `${label} ${g}: ${wide} with the float32 output vs ${rounded} without`);
        }
      for (const t of [cq, ck, cv, cdO]) t.dispose();
    });
  });

  it('cost of float32Output: time and peak memory at B=2 T=S=2048 N=16 H=128 causal', () => {
    const [B, T, N, H] = [2, 2048, 16, 128];
    const q = randomNormal([B, T, N, H], { seed: 1, dtype: 'bfloat16' }).to('cuda');
    const k = randomNormal([B, T, N, H], { seed: 2, dtype: 'bfloat16' }).to('cuda');
    const v = randomNormal([B, T, N, H], { seed: 3, dtype: 'bfloat16' }).to('cuda');
    const dO = randomNormal([B, T, N, H], { seed: 4, dtype: 'bfloat16' }).to('cuda');
    const median = (xs: number[]) => xs.sort((a, b) => a - b)[Math.floor(xs.length / 2)];
    for (const deterministic of [false, true])
      for (const float32Output of [false, true]) {
        const forward: number[] = [];
        const backward: number[] = [];
        let peak = 0;
        for (let run = 0; run < 6; run++) {
          synchronize();
          resetPeakMemory();
          const before = memoryStats().currentBytes;
          const t0 = performance.now();
          const f = attentionVjp(q, k, v, {
            isCausal: true,
            implementation: 'flash',
            deterministic,
            float32Output,
          });
          synchronize();
          const t1 = performance.now();
          const g = f.backward(dO);
          synchronize();
          const t2 = performance.now();
          peak = memoryStats().peakBytes - before;
          if (run > 0) {
            forward.push(t1 - t0);
            backward.push(t2 - t1);
          }
          const all: Array<Tensor | undefined> = [
            f.output,
            f.logSumExp,
            f.float32Output,
            g.dQuery,
            g.dKey,
            g.dValue,
          ];
          for (const t of all) t?.dispose();
        }
        console.log(
          `cost flash deterministic=${deterministic} float32Output=${float32Output}: forward ${median(forward).toFixed(2)} ms, backward ${median(backward).toFixed(2)} ms, peak ${(peak / 2 ** 20).toFixed(1)} MiB`,
        );
      }
    for (const t of [q, k, v, dO]) t.dispose();
  });
});
