/**
 * The FP8 attention step as a problem: the validated AttentionProblem plus the FP8 format, the
 * scaling and whether O is kept as FP8 codes; and what an FP8 backend needs to know of a module's
 * scaling state (the five tensors, their metas, the device mirror). TE's recipe machinery (src/te/)
 * implements the state; backends only read and write it, so they depend on nothing above them.
 */
import type { Fp8DType } from '../tensor/dtype.js';
import type { AttentionProblem } from './problem.js';

/** Q, K, V, S (the softmax output P fed to the second matmul) and O. */
export const FP8_TENSORS = ['q', 'k', 'v', 's', 'o'] as const;
export type Fp8TensorName = (typeof FP8_TENSORS)[number];
export type PerTensor<T> = { readonly [name in Fp8TensorName]: T };

/** One tensor's scale and rolled amax history, as the host state (te/recipe.ts Fp8TensorMeta) holds it. */
export interface Fp8MetaSlot {
  scale: number;
  readonly amaxHistory: Float64Array;
}

/**
 * A copy of the delayed-scaling state held elsewhere (the GPU's, state.ts) that steps update
 * without the host; `pull` brings it back into the host metas.
 */
export interface Fp8StateMirror {
  readonly historyLength: number;
  pull(metas: Readonly<Record<Fp8TensorName, Fp8MetaSlot>>): void;
  release(): void;
}

/**
 * The module's state as one step sees it, bound to the step's recipe by te/fp8-path.ts. A backend
 * ends each step with exactly one of these.
 */
export interface Fp8StepState {
  /** Ends a step computed on the host: records its amax values (delayed) and counts it. */
  recordHost(amax: PerTensor<number>): void;
  /** Ends a device step that keeps no state (current scaling): counts it. */
  countStep(): void;
  /** Ends a device step that updated the mirror on the device: the host metas are now behind. */
  deviceStepEnqueued(): void;
}

/** Current: scales from this step's amax. Delayed: scales and histories kept by the module's state. */
export type Fp8Scaling =
  | { readonly kind: 'current' }
  | {
      readonly kind: 'delayed';
      readonly margin: number;
      readonly mostRecent: boolean;
      /** The delayed scales held on the host. */
      hostScales(): PerTensor<number>;
      /** The device copy of the state, made by `upload` from the host metas when there is none. */
      deviceMirror<M extends Fp8StateMirror>(upload: (metas: PerTensor<Fp8MetaSlot>) => M): M;
    };

/** One FP8 step: validated, bfloat16, supported (fp8Support said so); `implementation` is unset. */
export interface Fp8StepProblem extends AttentionProblem {
  readonly dtype8: Fp8DType;
  readonly scaling: Fp8Scaling;
  readonly state: Fp8StepState;
  readonly keepFp8Output: boolean;
  /** Keep the FP8 operands, O8 and the statistics for a backward (Fp8StepOutput.residuals). */
  readonly keepResiduals?: boolean;
}
