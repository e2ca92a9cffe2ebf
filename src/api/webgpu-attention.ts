/**
 * Attention on the webgpu backend alone, for the browser entry (src/webgpu.ts): the same
 * validation as attention(), then the webgpu backend, without the registry (which loads the CUDA
 * backends and koffi). A case the backend cannot run throws UnsupportedError with its reason.
 */
import { planAndRun } from '../backends/backend.js';
import type { AttentionOptions, AttentionResult } from '../backends/problem.js';
import { webgpuBackend } from '../backends/webgpu/backend.js';
import { UnsupportedError } from '../errors.js';
import type { Tensor } from '../tensor/tensor.js';
import { validateAttention } from './validate.js';

/**
 * Scaled dot-product attention on WebGPU tensors, with `jax.nn.dot_product_attention`'s semantics
 * (see attention() in api/attention.ts for the formula and shapes). The output is a webgpu tensor:
 * read it with `await output.toFloat64ArrayAsync()`.
 *
 * @example
 * await initWebgpu();
 * const q = randomNormal([1, 128, 8, 64], { seed: 1 }).to('webgpu');
 * const { output } = webgpuAttention(q, q, q, { isCausal: true });
 * const values = await output.toFloat64ArrayAsync();
 */
export function webgpuAttention(
  query: Tensor,
  key: Tensor,
  value: Tensor,
  options: AttentionOptions = {},
): AttentionResult {
  const problem = validateAttention(query, key, value, options);
  if (problem.implementation !== undefined && problem.implementation !== 'webgpu') {
    throw new UnsupportedError(
      problem.implementation,
      "this entry runs only 'webgpu' (import 'attnlab' for the others)",
    );
  }
  if (problem.device !== 'webgpu') {
    throw new UnsupportedError(
      'webgpu',
      `the inputs are on ${problem.device} (move them with .to('webgpu'))`,
    );
  }
  const result = planAndRun(webgpuBackend, problem, (reason) => new UnsupportedError('webgpu', reason));
  const { T, N, Hv } = problem;
  return {
    output: problem.batched ? result.output : result.output.reshape([T, N, Hv]),
    logSumExp: result.logSumExp && !problem.batched ? result.logSumExp.reshape([T, N]) : result.logSumExp,
    backend: 'webgpu',
    device: 'webgpu',
    variant: result.variant,
  };
}
