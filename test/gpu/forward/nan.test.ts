/**
 * The NaN/Inf rule of docs/guide/attention.md on the GPU backends: every case of src/check/nan-cases.ts on naive
 * (float32, float16, bfloat16), flash (bfloat16, float16 on tensor cores; float32 on FMAs) and cudnn
 * (bfloat16, float16), compared with compareNanCase: the NaN, +inf and empty-row pattern exactly, the
 * rest against the float64 reference of the clean problem. A case a backend refuses is skipped with
 * its reason. The FP8 path has its own file, test/gpu/fp8/nan.test.ts. Skips, with the reason, where
 * there is no GPU.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { attention } from '../../../src/api/attention.js';
import { cudaAvailable } from '../../../src/backends/cuda/runtime/context.js';
import type { AttentionOptions } from '../../../src/backends/problem.js';
import { buildNanInputs, NAN_CASES, type NanCase } from '../../../src/check/nan-cases.js';
import { compareNanCase, NAN_CASE_TOLERANCE } from '../../../src/check/nan-pattern.js';
import { UnsupportedError } from '../../../src/errors.js';
import type { FloatDType } from '../../../src/tensor/dtype.js';

const cuda = cudaAvailable();
const skip = cuda.ok ? false : `no CUDA device: ${cuda.reason}`;
const seed = Number(process.env.ATTNLAB_TEST_SEED ?? Date.now() % 1_000_000_000);

const RUNS: ReadonlyArray<{ implementation: 'naive' | 'flash' | 'cudnn'; dtypes: FloatDType[] }> = [
  { implementation: 'naive', dtypes: ['float32', 'float16', 'bfloat16'] },
  { implementation: 'flash', dtypes: ['bfloat16', 'float16', 'float32'] },
  { implementation: 'cudnn', dtypes: ['bfloat16', 'float16'] },
];

function onCuda(options: AttentionOptions): AttentionOptions {
  return { ...options, bias: options.bias?.to('cuda'), mask: options.mask?.to('cuda') };
}

/** The clean problem's float64 reference, from the same rounded values the backend gets. */
function cleanReference(c: NanCase, dtype: FloatDType) {
  const { q, k, v, options } = buildNanInputs(c, dtype, seed, false);
  const r = attention(q.astype('float64'), k.astype('float64'), v.astype('float64'), {
    ...options,
    bias: options.bias?.astype('float64'),
    implementation: 'reference',
    returnLogSumExp: true,
  });
  return { output: r.output.toFloat64Array(), lse: r.logSumExp!.toFloat64Array() };
}

describe('GPU: NaN and Inf reach exactly the rows that see them', { skip }, () => {
  console.log(`forward/nan.test.ts seed ${seed} (ATTNLAB_TEST_SEED=${seed} replays it)`);
  for (const { implementation, dtypes } of RUNS) {
    for (const dtype of dtypes) {
      describe(`${implementation} ${dtype}`, () => {
        for (const c of NAN_CASES) {
          it(c.name, (t) => {
            const clean = cleanReference(c, dtype);
            const { q, k, v, options } = buildNanInputs(c, dtype, seed, true);
            let r: ReturnType<typeof attention>;
            try {
              r = attention(q.to('cuda'), k.to('cuda'), v.to('cuda'), {
                ...onCuda(options),
                implementation,
                returnLogSumExp: true,
              });
            } catch (error) {
              if (error instanceof UnsupportedError) return t.skip(error.message);
              throw error;
            }
            const cmp = compareNanCase(
              c,
              r.output.toFloat64Array(),
              r.logSumExp?.toFloat64Array(),
              clean.output,
              clean.lse,
              NAN_CASE_TOLERANCE[dtype as keyof typeof NAN_CASE_TOLERANCE],
            );
            r.output.dispose();
            r.logSumExp?.dispose();
            assert.ok(cmp.ok, `${implementation} ${dtype} (${r.variant}): ${cmp.message}`);
          });
        }
      });
    }
  }
});
