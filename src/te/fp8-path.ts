/**
 * One FP8 attention step of the module: pick the scales (delayed from the state, or current from
 * this step's amax), quantise Q/K/V, run attention on the FP8 operands, return O in the module's
 * dtype (or as FP8 codes with their scale), and feed the five amax values back into the state.
 *
 * On CUDA the step runs cuDNN's FP8 graph (src/backends/cuda/fp8/). On the CPU it is emulated with
 * the float64 FP8 reference over the same quantised operands — the same scales, the same state
 * updates — so the whole recipe machinery is testable without a GPU.
 */

import { type Fp8StepReport, runCudaFp8 } from '../backends/cuda/fp8/run.js';
import { DeviceDelayedState } from '../backends/cuda/fp8/state.js';
import type { AttentionOptions, AttentionProblem } from '../backends/problem.js';
import type { Tensor } from '../tensor/tensor.js';
import { fp8ReferenceAttention } from './fp8-reference.js';
import { currentScales, type Fp8State } from './fp8-state.js';
import { absMax, dequantiseTensor, quantiseValues } from './quantise.js';
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
  readonly backend: 'cudnn-fp8' | 'cpu-fp8-emulated';
  readonly variant: string;
}

/**
 * Runs one FP8 step on the device of the problem's tensors. `options` are the dotProductAttention
 * options the problem was validated from.
 */
export function runFp8Step(
  p: AttentionProblem,
  options: AttentionOptions,
  recipe: Fp8Recipe,
  state: Fp8State,
  keepFp8Output: boolean,
): Fp8StepResult {
  const dtype8 = forwardDType(recipe.fp8Format);
  if (p.device === 'cuda') {
    if (recipe.kind === 'current') {
      const result = runCudaFp8({ problem: p, dtype8, scaling: { kind: 'current' }, keepFp8Output });
      state.steps++;
      return { ...result, backend: 'cudnn-fp8' };
    }
    // The histories and scales live on the device between steps; the host copy catches up when read.
    const deviceState = state.mirrorFor(recipe, DeviceDelayedState.upload);
    const result = runCudaFp8({
      problem: p,
      dtype8,
      scaling: {
        kind: 'delayed',
        state: deviceState,
        margin: recipe.margin,
        mostRecent: recipe.amaxComputeAlgo === 'most_recent',
      },
      keepFp8Output,
    });
    state.deviceStepEnqueued();
    return { ...result, backend: 'cudnn-fp8' };
  }
  const values = { q: p.query.toFloat64Array(), k: p.key.toFloat64Array(), v: p.value.toFloat64Array() };
  const scales =
    recipe.kind === 'delayed'
      ? state.delayedScales(recipe)
      : currentScales({ q: absMax(values.q), k: absMax(values.k), v: absMax(values.v) }, dtype8);
  const q8 = quantiseValues(values.q, p.query.shape, scales.q, dtype8);
  const k8 = quantiseValues(values.k, p.key.shape, scales.k, dtype8);
  const v8 = quantiseValues(values.v, p.value.shape, scales.v, dtype8);
  const reference = fp8ReferenceAttention(q8, k8, v8, options, scales.o, dtype8);
  const amax = { q: q8.amax, k: k8.amax, v: v8.amax, s: reference.amaxS, o: reference.amaxO };
  state.record(recipe, amax, dtype8);
  const { tensor, scaleInv } = reference.output8;
  return {
    output: dequantiseTensor(tensor, scaleInv, p.dtype),
    output8: keepFp8Output ? { tensor, scaleInv } : undefined,
    report: { scales, amax },
    backend: 'cpu-fp8-emulated',
    variant: `cpu-fp8-emulated-${dtype8}-${p.causal ? 'causal' : 'full'}`,
  };
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
