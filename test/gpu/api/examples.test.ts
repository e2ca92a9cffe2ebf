/**
 * examples/ on the GPU: each program picks the GPU through cudaAvailable() and must say it ran on
 * cuda, exit 0 and pass its own numeric check there (bf16 or fp16 on the device against the float64
 * reference, a falling loss, FP8 on Hopper or bf16 with fallback elsewhere), all at once so their
 * kernel compiles overlap. Skips, with the reason, where there is no GPU.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { cudaAvailable } from '../../../src/backends/cuda/runtime/context.js';
import { exampleFiles, runExample } from '../../examples/run-examples.js';

const cuda = cudaAvailable();
const skip = cuda.ok ? false : `no CUDA device: ${cuda.reason}`;

describe('examples on the GPU', { skip, concurrency: true }, () => {
  for (const name of exampleFiles()) {
    it(`${name} runs on cuda`, async () => {
      const run = await runExample(name, { NO_COLOR: '1' }, 300_000);
      assert.equal(run.code, 0, `${name} exited ${run.code}\n${run.stdout}\n${run.stderr}`);
      assert.match(run.stdout, /on cuda/, `${name} did not say it ran on cuda:\n${run.stdout}`);
      console.log(`${name}:\n${run.stdout}`);
    });
  }
});
