/**
 * One FP8 attention step of the module: pick the scales (delayed from the state, or current from
 * this step's amax), quantise Q/K/V, run attention on the FP8 operands, return O in the module's
 * dtype (or as FP8 codes with their scale), and feed the five amax values back into the state.
 *
 * The step runs on the FP8 backend the FP8 table (backends/fp8-registry.ts) picks for the problem's
 * device: cuDNN's FP8 graph on CUDA (backends/cuda/fp8/), the float64 emulation on the CPU
 * (backends/cpu/fp8-emulation.ts) — the same scales, the same state updates — so the whole recipe
 * machinery is testable without a GPU.
 */

import { runPlanned } from '../backends/backend.js';
import type { Fp8BackendName, Fp8Residuals, Fp8StepReport } from '../backends/fp8-backend.js';
import type { Fp8Scaling, Fp8StepProblem, Fp8StepState } from '../backends/fp8-problem.js';
import { chooseFp8Backend } from '../backends/fp8-registry.js';
import type { AttentionProblem } from '../backends/problem.js';
import type { Tensor } from '../tensor/tensor.js';
import type { Fp8State } from './fp8-state.js';
import { type Fp8Recipe, forwardDType } from './recipe.js';

export interface Fp8StepResult {
  /** O (B,T,N,Hv) in the inputs' dtype. */
  readonly output: Tensor;
  /** O as FP8 codes with the factor back to its units (kept only when asked for). */
  readonly output8?: { readonly tensor: Tensor; readonly scaleInv: number };
  /**
   * The scales this step quantised with and the amax values it measured (before scaling). On the GPU
   * they are read back on first use, which waits for the step.
   */
  readonly report: Fp8StepReport;
  readonly backend: Fp8BackendName;
  readonly variant: string;
  /** What the backward needs, when the step was asked to keep it. */
  readonly residuals?: Fp8Residuals;
}

/** Runs one FP8 step on the device of the problem's tensors, through the FP8 table. */
export function runFp8Step(
  p: AttentionProblem,
  recipe: Fp8Recipe,
  state: Fp8State,
  keepFp8Output: boolean,
  keepResiduals = false,
): Fp8StepResult {
  const dtype8 = forwardDType(recipe.fp8Format);
  // The state bound to this step's recipe: how a backend reads it and ends the step.
  const stepState: Fp8StepState = {
    recordHost: (amax) => state.record(recipe, amax, dtype8),
    countStep: () => {
      state.steps++;
    },
    deviceStepEnqueued: () => state.deviceStepEnqueued(),
  };
  const scaling: Fp8Scaling =
    recipe.kind === 'delayed'
      ? {
          kind: 'delayed',
          margin: recipe.margin,
          mostRecent: recipe.amaxComputeAlgo === 'most_recent',
          hostScales: () => state.delayedScales(recipe),
          deviceMirror: (upload) => state.mirrorFor(recipe, upload),
        }
      : { kind: 'current' };
  const problem: Fp8StepProblem = {
    ...p,
    implementation: undefined,
    dtype8,
    scaling,
    state: stepState,
    keepFp8Output,
    keepResiduals,
  };
  const chosen = chooseFp8Backend(problem);
  return { ...runPlanned(chosen.backend, chosen.plan, problem), backend: chosen.backend.name };
}

/**
 * The FP8 code path in words: what would run on a Hopper GPU for this problem and recipe, printed
 * where it cannot run (the codelab's seed showed the autocast snippet on GPUs without FP8).
 */
export function describeFp8Path(p: AttentionProblem, recipe: Fp8Recipe): string {
  const scaling =
    recipe.kind === 'delayed'
      ? `DelayedScaling(margin=${recipe.margin}, ${recipe.fp8Format}, amaxHistoryLen=${recipe.amaxHistoryLen}, ` +
        `'${recipe.amaxComputeAlgo}')`
      : `Float8CurrentScaling(${recipe.fp8Format})`;
  const mask = p.causal ? 'causal' : 'no mask';
  return [
    `on sm_90+ under autocast({ recipe: ${scaling} }) this call would run:`,
    `  1. quantise Q (B=${p.B},T=${p.T},N=${p.N},H=${p.H}), K and V (S=${p.S},K=${p.K}) to e4m3 with their scales, recording amax (one fused kernel)`,
    `  2. cuDNN FP8 SDPA graph: S = Q8·K8ᵀ·scale·descale_q·descale_k (${mask}), softmax, P8 = e4m3(P·scale_s), ` +
      'O8 = e4m3(P8·V8·descale_s·descale_v·scale_o), amax_s and amax_o out',
    '  3. dequantise O8 to bfloat16 (O8 · 1/scale_o), and feed the five amax values into the amax history',
  ].join('\n');
}
