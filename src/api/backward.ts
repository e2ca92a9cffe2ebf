/**
 * The attention backward pass: attentionBackward (explicit residuals) and attentionVjp (forward now,
 * pullback later, like jax.vjp). Validate once, choose a backward backend from its table, run it.
 */

import { checkOptionsObject } from '../arguments.js';
import { runPlanned } from '../backends/backend.js';
import type {
  AttentionBackwardResult,
  AttentionVjpResult,
  BackwardOptions,
  BackwardProblem,
} from '../backends/backward-problem.js';
import { backwardDecision, chooseBackwardBackend } from '../backends/backward-registry.js';
import { exactLogSumExp } from '../backends/cpu/reference-backward.js';
import { widenToFloat32 } from '../backends/cuda/ops/widen.js';
import type { AttentionOptions, AttentionProblem } from '../backends/problem.js';
import { widenWebgpu } from '../backends/webgpu/widen.js';
import { config } from '../config.js';
import { Tensor } from '../tensor/tensor.js';
import { runAttention } from './attention.js';
import { validateAttention } from './validate.js';
import {
  denseForBackward,
  OPTIONS_EXPECTED,
  splitBackwardOptions,
  validateBackward,
} from './validate-backward.js';

function runBackward(p: BackwardProblem): AttentionBackwardResult {
  const { backend, plan } = chooseBackwardBackend(p);
  const r = runPlanned(backend, plan, p);
  // ATTNLAB_DEBUG ≥ 1: which backend and kernel variant ran each call.
  if (config().debug >= 1) {
    const { B, T, S, N, K, H } = p;
    const decision = backwardDecision(p);
    const why = decision ? ` (auto, ${decision.source}: ${decision.why})` : '';
    process.stderr.write(
      `[attnlab] backward ${backend.name} (${backend.device}) ran ${r.variant} for B=${B} T=${T} S=${S} N=${N} K=${K} H=${H} ${p.dtype}${why}\n`,
    );
  }
  // Unbatched callers get unbatched gradients; dBias already has the bias's own shape.
  const own = (t: Tensor, like: Tensor) => (p.batched ? t : t.reshape(like.shape.slice(1)));
  return {
    dQuery: own(r.dQuery, p.query),
    dKey: own(r.dKey, p.key),
    dValue: own(r.dValue, p.value),
    dBias: r.dBias,
    dCaptures: r.dCaptures,
    backend: backend.name,
    device: backend.device,
    variant: r.variant,
  };
}

/**
 * Gradients of scaled dot-product attention with respect to query, key, value (and bias), given the
 * forward's output and log-sum-exp (`attention(..., { returnLogSumExp: true })`) and ∂loss/∂output.
 *
 *   dV = Pᵀ·dO,  dS = P∘(dO·Vᵀ − rowsum(dO∘O)),  dQ = scale·dS·K,  dK = scale·dSᵀ·Q,  dBias = Σ dS
 *
 * with P the forward's softmax weights; dKey/dValue are summed over each KV head's query heads
 * (GQA/MQA), dBias over the dimensions the bias was broadcast on. Shapes as the forward: query
 * (B,T,N,H), key (B,S,K,H), value (B,S,K,Hv), output and dOutput (B,T,N,Hv), logSumExp (B,T,N) float32
 * (or all without B). Gradients come in the inputs' dtypes (float32 accumulation inside). Options are
 * the forward's (use the same ones), plus `deterministic`.
 *
 * @example
 * const f = attention(q, k, v, { isCausal: true, returnLogSumExp: true });
 * const dOut = Tensor.fromArray(new Float64Array(f.output.size).fill(1), f.output.shape, f.output.dtype);
 * const { dQuery, dKey, dValue } = attentionBackward(q, k, v, f.output, f.logSumExp!, dOut, { isCausal: true });
 */
export function attentionBackward(
  query: Tensor,
  key: Tensor,
  value: Tensor,
  output: Tensor,
  logSumExp: Tensor,
  dOutput: Tensor,
  options: BackwardOptions = {},
): AttentionBackwardResult {
  return runBackward(validateBackward(query, key, value, output, logSumExp, dOutput, options));
}

/**
 * Runs the forward and returns its output with a pullback, as `jax.vjp` does: `backward(dOutput)`
 * gives { dQuery, dKey, dValue, dBias? } from the residuals kept here (inputs, output, log-sum-exp),
 * and may be called any number of times. Same options as {@link attention}, plus `deterministic`.
 * The inputs and the output must stay alive (undisposed) while `backward` may still be called.
 *
 * @example
 * const f = attentionVjp(q, k, v, { isCausal: true });
 * const loss = f.output;                      // e.g. loss = Σ output: dOutput is all ones
 * const { dQuery } = f.backward(Tensor.fromArray(new Float64Array(loss.size).fill(1), loss.shape, loss.dtype));
 */
export function attentionVjp(
  query: Tensor,
  key: Tensor,
  value: Tensor,
  options: BackwardOptions = {},
): AttentionVjpResult {
  // The options as they are now (the snapshot copies lists too: lengths, the window): backward() runs later,
  // and a caller reusing (mutating) the object between the two would get the gradients of another forward.
  const kept = checkOptionsObject<BackwardOptions>('options', options, OPTIONS_EXPECTED);
  const { forwardOptions, float32Output } = splitBackwardOptions(kept);
  // Every option checked as given (returnLogSumExp too, which the forward then sets); a layout the backward
  // refuses is refused here, before the forward runs and its residuals are kept.
  const problem = {
    ...denseForBackward(validateAttention(query, key, value, forwardOptions)),
    returnLogSumExp: true,
  };
  const forward = runAttention(problem);
  const logSumExp = forward.logSumExp as Tensor;
  // On the CPU float64 inputs keep a float64 log-sum-exp for the backward: the forward's float32 one
  // would limit the gradients to ~1e-7 relative.
  let residual = logSumExp;
  if (forward.device === 'cpu' && query.dtype === 'float64') {
    residual = Tensor.fromRaw(exactLogSumExp(problem), logSumExp.shape, 'float64');
  }
  const sixteenBit = problem.dtype === 'bfloat16' || problem.dtype === 'float16';
  const outputForD = float32Output && sixteenBit ? float32ForwardOutput(problem, forwardOptions) : undefined;
  const { float32Output: _, ...backwardOptions } = kept;
  return {
    output: forward.output,
    logSumExp,
    backend: forward.backend,
    variant: forward.variant,
    float32Output: outputForD,
    backward: (dOutput: Tensor) =>
      attentionBackward(query, key, value, outputForD ?? forward.output, residual, dOutput, backwardOptions),
  };
}

/**
 * The output of the same attention in float32, for D = rowsum(dO∘O): the forward run again on float32
 * copies of the 16-bit inputs (exact: every bfloat16/float16 value is a float32 one), so the only
 * difference from the forward's output is the last rounding.
 */
function float32ForwardOutput(p: AttentionProblem, options: AttentionOptions): Tensor {
  const wide = (t: Tensor) =>
    t.device === 'cpu' ? t.astype('float32') : t.device === 'webgpu' ? widenWebgpu(t) : widenToFloat32(t);
  const [q, k, v] = [p.query, p.key, p.value].map(wide);
  // A 16-bit bias widens too: the float32 problem takes a float32 or float64 bias.
  const sixteen = options.bias && (options.bias.dtype === 'bfloat16' || options.bias.dtype === 'float16');
  const bias = sixteen ? wide(options.bias as Tensor) : options.bias;
  // On CUDA the float32 flash kernel (O(T) memory) whatever ran the forward: cuDNN takes no float32,
  // naive would hold the (B,N,T,S) scores; on the CPU the backend asked for (both compute in float64).
  const implementation = p.device === 'cuda' ? 'flash' : options.implementation;
  try {
    const problem = validateAttention(q, k, v, { ...options, bias, implementation, returnLogSumExp: false });
    const output = runAttention(problem).output;
    return p.batched ? output : output.reshape(output.shape.slice(1));
  } finally {
    if (p.device !== 'cpu') for (const t of [q, k, v, sixteen ? bias : undefined]) t?.dispose();
  }
}
