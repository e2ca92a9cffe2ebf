/**
 * What an FP8 attention backend is (the FP8 step's table is fp8-registry.ts): a name, a device,
 * `plan` and `run`, which quantises Q/K/V, runs attention on the FP8 operands and ends the step on
 * the problem's state.
 */
import type { Tensor } from '../tensor/tensor.js';
import type { Backend } from './backend.js';
import type { Fp8StepProblem, PerTensor } from './fp8-problem.js';

/** The scales a step quantised with and the amax values it measured. */
export interface Fp8StepReport {
  readonly scales: PerTensor<number>;
  readonly amax: PerTensor<number>;
}

/**
 * What an FP8 step keeps for its backward (when asked): the e4m3 operands and output it computed
 * with, and on the GPU the float32 (B,N,T) log-sum-exp of cuDNN's FP8 graph (the CPU emulation
 * recomputes the softmax exactly and keeps none). The step's report holds the scales.
 */
export interface Fp8Residuals {
  readonly q8: Tensor;
  readonly k8: Tensor;
  readonly v8: Tensor;
  readonly o8: Tensor;
  readonly logSumExp: Tensor | null;
}

export interface Fp8StepOutput {
  /** O (B,T,N,Hv) in the inputs' dtype. */
  readonly output: Tensor;
  /** O as FP8 codes with the factor back to its units (kept only when asked for). */
  readonly output8?: { readonly tensor: Tensor; readonly scaleInv: number };
  /** On the GPU read back on first use, which waits for the step. */
  readonly report: Fp8StepReport;
  readonly variant: string;
  /** Present when the problem asked to keep residuals (keepResiduals). */
  readonly residuals?: Fp8Residuals;
}

export type Fp8BackendName = 'cudnn-fp8' | 'cpu-fp8-emulated';

/** The one backend contract (backend.ts: plan, run, post-ops) for the FP8 step. */
export interface Fp8Backend<Plan = unknown> extends Backend<Fp8StepProblem, Fp8StepOutput, Plan> {
  readonly name: Fp8BackendName;
}
