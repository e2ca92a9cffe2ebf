/**
 * attnlab: scaled dot-product attention for TypeScript, on the CPU and on NVIDIA GPUs.
 * This file is the whole public surface; everything else is internal.
 */
export { attention, dotProductAttention } from './api/attention.js';
export { attentionBackward, attentionVjp } from './api/backward.js';
export { createBlockMask } from './api/block-mask.js';
export {
  type ContextParallelOptions,
  type ContextParallelResult,
  contextParallelAttention,
  gatherSequence,
  shardSequence,
} from './api/context-parallel.js';
export { KVCache, type KVCacheOptions } from './api/kv-cache.js';
export { type MemoryStats, memoryStats } from './api/memory.js';
export { RingGroup, type RingGroupKind } from './api/ring-group.js';
export {
  type AttentionBackwardResult,
  type AttentionGradients,
  type AttentionVjpResult,
  attentionBackwardFlops,
  type BackwardOptions,
} from './backends/backward-problem.js';
export { cudaAvailable, deviceCount, onDevice } from './backends/cuda/runtime/context.js';
export { emptyCache, resetPeakMemory } from './backends/cuda/runtime/memory.js';
export {
  type AttentionOptions,
  type AttentionResult,
  attentionFlops,
  type CausalAlignment,
  type Float32Precision,
  IMPLEMENTATIONS,
  type Implementation,
} from './backends/problem.js';
export {
  disposeWebgpu,
  type InitWebgpuOptions,
  initWebgpu,
  type WebgpuInfo,
  type WebgpuLimits,
} from './backends/webgpu/runtime.js';
export {
  AttnlabError,
  CacheFullError,
  CompileError,
  DeviceError,
  InvalidArgumentError,
  LibraryNotFoundError,
  OutOfMemoryError,
  UnsupportedError,
} from './errors.js';
export { type AutocastOptions, autocast, type Fp8Autocast } from './te/autocast.js';
export {
  DotProductAttention,
  type DotProductAttentionResult,
  type ForwardOptions,
  SequenceDescriptor,
} from './te/module.js';
export { DelayedScaling, Float8CurrentScaling, type Fp8Recipe } from './te/recipe.js';
export {
  ALL_DTYPES,
  type DType,
  decodeValue,
  encodeValue,
  FLOAT_DTYPES,
  finiteMax,
  roundTo,
} from './tensor/dtype.js';
export { Random, randomNormal, randomUniform } from './tensor/random.js';
export { keep, tidy } from './tensor/scope.js';
export type { Device } from './tensor/storage.js';
export { Tensor } from './tensor/tensor.js';
export type { BlockMaskOptions } from './variants/block-mask.js';
export {
  alibi,
  alibiSlopes,
  and,
  causal,
  documentMask,
  not,
  or,
  prefixLm,
  relativeBias,
  sinks,
  slidingWindow,
  softcap,
} from './variants/library.js';
export {
  type MaskMod,
  type Modifier,
  type ModifierOptions,
  maskMod,
  type ScoreMod,
  scoreMod,
} from './variants/modifiers.js';
export type { BlockMask } from './variants/types.js';
