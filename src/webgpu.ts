/**
 * `attnlab/webgpu`: attention on WebGPU wherever TypeScript runs, browsers included. ESM with no
 * koffi and no Node built-in: tensors, the webgpu backend, its device, and the correctness suite.
 * In Node, `attnlab` itself has all of this beside the CPU and CUDA backends.
 *
 * @example
 * import { initWebgpu, randomNormal, webgpuAttention } from 'attnlab/webgpu';
 * await initWebgpu();
 * const q = randomNormal([1, 256, 8, 64], { seed: 1, dtype: 'float16' }).to('webgpu');
 * const { output, variant } = webgpuAttention(q, q, q, { isCausal: true });
 * console.log(variant, (await output.toFloat64ArrayAsync()).slice(0, 4));
 */
export { webgpuAttention } from './api/webgpu-attention.js';
export type { AttentionOptions, AttentionResult, CausalAlignment } from './backends/problem.js';
export { attentionFlops } from './backends/problem.js';
export { webgpuMemoryStats } from './backends/webgpu/memory.js';
export {
  disposeWebgpu,
  type InitWebgpuOptions,
  initWebgpu,
  type WebgpuInfo,
  type WebgpuLimits,
  webgpuFinish,
} from './backends/webgpu/runtime.js';
export { type CheckRow, describeRow } from './check/suite.js';
export { runWebgpuCheck, type WebgpuCheckOptions } from './check/webgpu-check.js';
export {
  AttnlabError,
  DeviceError,
  InvalidArgumentError,
  UnsupportedError,
} from './errors.js';
export type { DType } from './tensor/dtype.js';
export { Random, randomNormal, randomUniform } from './tensor/random.js';
export { keep, tidy } from './tensor/scope.js';
export type { Device } from './tensor/storage.js';
export { Tensor } from './tensor/tensor.js';
