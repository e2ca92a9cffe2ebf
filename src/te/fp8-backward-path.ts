/**
 * The module's FP8 backward, as TE's FP8 DotProductAttention runs it under a HYBRID recipe: an FP8
 * forward step that keeps its residuals (Q8, K8, V8, O8 in e4m3, the statistics, its scales), then
 * dO quantised to the gradient type (e5m2 under HYBRID, e4m3 under E4M3) with the backward's delayed
 * scale, the FP8 backward (cuDNN's graph on the GPU, its float64 emulation on the CPU), and the amax
 * of dO, dP, dQ, dK and dV recorded in the backward's histories (Fp8State.recordBackward).
 */

import { describeValue } from '../arguments.js';
import { FP8_GRADIENTS, type Fp8BackwardOutput, type PerGradient } from '../backends/fp8-backward-problem.js';
import { runFp8Backward } from '../backends/fp8-registry.js';
import type { AttentionProblem } from '../backends/problem.js';
import { InvalidArgumentError } from '../errors.js';
import { finiteMax } from '../tensor/dtype.js';
import { checkTensor, Tensor } from '../tensor/tensor.js';
import { runFp8Step } from './fp8-path.js';
import type { Fp8State } from './fp8-state.js';
import { backwardDType, type DelayedScaling } from './recipe.js';

export interface Fp8BackwardStepResult extends Fp8BackwardOutput {
  readonly backend: 'cudnn-fp8' | 'cpu-fp8-emulated';
  /** The forward's variant, then the backward's. */
  readonly forwardVariant: string;
  /** The backward's scales (this step) and the amax values it measured. */
  readonly scales: PerGradient<number>;
  /** The backward tensors whose values passed the FP8 format at this step's scale (see fp8Overflow); empty when none. */
  readonly overflow: readonly string[];
}

/**
 * Each backward tensor whose amax × scale passed the format's largest finite value, or whose amax is not finite:
 * its FP8 codes saturated (the CPU emulation) or became NaN (cuDNN), so the gradients computed from it are clipped
 * or NaN. Said, not left for the caller to find: delayed scaling sets the next step's scale from this step's amax,
 * so a first step with scale 1 and an upstream gradient past 448 (e4m3) or 57344 (e5m2) overflows once.
 */
export function fp8Overflow(
  amax: PerGradient<number>,
  scales: PerGradient<number>,
  dtype8: 'float8_e4m3fn' | 'float8_e5m2',
): string[] {
  const max = finiteMax(dtype8);
  const found: string[] = [];
  for (const name of FP8_GRADIENTS) {
    const scaled = amax[name] * scales[name];
    if (!(scaled <= max)) {
      found.push(
        `${name}: amax ${amax[name].toPrecision(4)} × scale ${scales[name].toPrecision(4)} passes ${dtype8}'s ${max}`,
      );
    }
  }
  return found;
}

/** dOutput must be O's shape, the inputs' dtype and device. */
function checkDOutput(p: AttentionProblem, dOutput: unknown): Tensor {
  if (!(dOutput instanceof Tensor)) {
    throw new InvalidArgumentError('dOutput', 'a Tensor of the output shape', describeValue(dOutput));
  }
  checkTensor('dOutput', dOutput); // live, and a Tensor itself (not a Proxy of one)
  const want = [p.B, p.T, p.N, p.Hv];
  if (dOutput.shape.join(',') !== want.join(',')) {
    throw new InvalidArgumentError('dOutput', `shape (${want.join(', ')})`, `(${dOutput.shape.join(', ')})`);
  }
  if (dOutput.dtype !== p.dtype) throw new InvalidArgumentError('dOutput', `dtype ${p.dtype}`, dOutput.dtype);
  if (dOutput.device !== p.device) {
    throw new InvalidArgumentError('dOutput', `a tensor on ${p.device}`, `a tensor on ${dOutput.device}`);
  }
  return dOutput;
}

/** One FP8 forward + backward; `p` is validated and fp8BackwardSupportFor(p, 'delayed') said yes. */
export function runFp8BackwardStep(
  p: AttentionProblem,
  recipe: DelayedScaling,
  state: Fp8State,
  dOutput: Tensor,
): Fp8BackwardStepResult {
  checkDOutput(p, dOutput);
  const forward = runFp8Step(p, recipe, state, false, true);
  const residuals = forward.residuals!;
  try {
    const scales = state.backwardScales(recipe);
    const out = runFp8Backward({
      problem: p,
      residuals,
      forwardScales: forward.report.scales,
      dOutput,
      dtype8: backwardDType(recipe.fp8Format),
      scales,
    });
    state.recordBackward(recipe, out.amax);
    const overflow = fp8Overflow(out.amax, scales, backwardDType(recipe.fp8Format));
    return { ...out, backend: forward.backend, forwardVariant: forward.variant, scales, overflow };
  } finally {
    if (p.device === 'cuda') {
      forward.output.dispose();
      for (const t of [residuals.q8, residuals.k8, residuals.v8, residuals.o8, residuals.logSumExp])
        t?.dispose();
    }
  }
}
