/**
 * One FP8 attention step on the GPU: quantise Q/K/V (fused quantise + amax kernel), cuDNN's FP8 SDPA
 * graph, dequantise O, read the five amax values back.
 */
import { UnsupportedError } from '../../../api/errors.js';
import type { AttentionProblem } from '../../../api/problem.js';
import type { Fp8State, PerTensor } from '../../../te/fp8-state.js';
import type { Fp8DType } from '../../../te/quantise.js';
import type { Tensor } from '../../../tensor/tensor.js';

export interface CudaFp8Request {
  readonly problem: AttentionProblem;
  readonly dtype8: Fp8DType;
  /** Delayed: the scales to use; current: derived on the GPU from this step's amax. */
  readonly scaling:
    | { readonly kind: 'delayed'; readonly scales: PerTensor<number> }
    | { readonly kind: 'current' };
  readonly keepFp8Output: boolean;
}

export interface CudaFp8Result {
  readonly output: Tensor;
  readonly output8?: { readonly tensor: Tensor; readonly scaleInv: number };
  readonly scales: PerTensor<number>;
  readonly amax: PerTensor<number>;
  readonly variant: string;
}

export function runCudaFp8(_request: CudaFp8Request, _state?: Fp8State): CudaFp8Result {
  throw new UnsupportedError('cudnn-fp8', 'the CUDA FP8 runner is not integrated yet');
}
