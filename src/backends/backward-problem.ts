/**
 * The backward pass's public options and results, and the validated problem every backward backend
 * receives: the forward's AttentionProblem plus the forward's output, its log-sum-exp and the
 * incoming gradient dOutput.
 *
 * Gradients of out = softmax(scale · Q·Kᵀ + bias) · V, per row (b, t, n) with P its softmax weights:
 *   dV[s]   += P[s] · dO            (summed over the G = N/K query heads of each KV head)
 *   dP[s]    = dO · V[s]
 *   dS[s]    = P[s] · (dP[s] − D),   D = Σ_s P[s]·dP[s] = dO · O
 *   dQ      += scale · Σ_s dS[s] · K[s]
 *   dK[s]   += scale · dS[s] · Q     (summed over the group, as dV)
 *   dBias   += dS                    (summed over the dimensions the bias was broadcast on)
 * Keys a row does not see (masked, causal, out of window, padding) get no gradient from it; a row
 * that sees no key, and a padded row, give zero gradients.
 */
import type { Device } from '../tensor/storage.js';
import type { Tensor } from '../tensor/tensor.js';
import {
  type AttentionOptions,
  type AttentionProblem,
  attentionFlops,
  type Implementation,
} from './problem.js';

/** The forward's options (bias, mask, scale, causal, lengths, window, implementation…) plus: */
export interface BackwardOptions extends Omit<AttentionOptions, 'returnLogSumExp'> {
  /**
   * Ask for a run-to-run bitwise identical backward. Backends whose dQuery accumulation order
   * depends on scheduling (atomics) take a slower ordered path or refuse; the CPU backends and
   * `naive` (plain GEMMs) are always deterministic.
   */
  deterministic?: boolean;
  /**
   * attentionVjp only, for bfloat16/float16 inputs: keep the forward's output in float32 as well
   * (4 bytes per output element) and take D = rowsum(dO∘O) from it rather than from the rounded
   * output. In a peaked softmax D from the rounded output dominates the dK and dQ error
   * (docs/guide/gradient-accuracy.md gives the measured errors and cost). Default false, as
   * FlashAttention and cuDNN do. attentionBackward takes the same choice from a float32 `output`.
   */
  float32Output?: boolean;
}

/** Everything a backward backend needs, validated once. Shapes are batched (B first). */
export interface BackwardProblem extends AttentionProblem {
  /** The forward's output (B,T,N,Hv), in the query dtype or float32 (D from the unrounded output). */
  readonly output: Tensor;
  /** The forward's log-sum-exp (B,T,N): float32 (float64 accepted on the CPU); −inf for an empty row. */
  readonly logSumExp: Tensor;
  /** ∂loss/∂output (B,T,N,Hv), in the query dtype. */
  readonly dOutput: Tensor;
  readonly deterministic: boolean;
}

/** Gradients with respect to each input, in that input's shape and dtype. */
export interface AttentionGradients {
  readonly dQuery: Tensor;
  readonly dKey: Tensor;
  readonly dValue: Tensor;
  /** Present when a bias was given: the bias's own shape and dtype. */
  readonly dBias?: Tensor;
  /**
   * Present when a score modifier learns captured tensors (`scoreMod(…, { learn: ['table'] })`, relativeBias):
   * each one's gradient by its capture name, float32 in the capture's shape.
   */
  readonly dCaptures?: Readonly<Record<string, Tensor>>;
}

/** What a backward backend returns (batched shapes), with the kernel variant that ran. */
export interface BackwardOutput extends AttentionGradients {
  readonly variant: string;
}

/** The result of `attentionBackward()`: the gradients, and which backend and kernel produced them. */
export interface AttentionBackwardResult extends AttentionGradients {
  readonly backend: Implementation;
  readonly device: Device;
  readonly variant: string;
}

/** The result of `attentionVjp()`: the forward's output and residuals, and the pullback. */
export interface AttentionVjpResult {
  readonly output: Tensor;
  /** (B,T,N) float32, natural log; −inf for a row that sees no key. */
  readonly logSumExp: Tensor;
  /** The forward backend and kernel variant. */
  readonly backend: Implementation;
  readonly variant: string;
  /**
   * With `float32Output` and 16-bit inputs: the forward's output in float32, which the backward takes
   * D = rowsum(dO∘O) from (dispose it with the output when done); else undefined.
   */
  readonly float32Output?: Tensor;
  /** Gradients for `dOutput` (the output's shape and dtype); may be called any number of times. */
  backward(dOutput: Tensor): AttentionBackwardResult;
}

/**
 * Floating-point work of one backward: 2.5× the forward's 4·B·N·T·S·H (five matmuls of the forward's
 * two-matmul size each, FlashAttention's convention), halved when causal.
 */
export function attentionBackwardFlops(p: Parameters<typeof attentionFlops>[0]): number {
  return 2.5 * attentionFlops(p);
}
