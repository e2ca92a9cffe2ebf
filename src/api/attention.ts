/**
 * dotProductAttention: validate once, choose a backend from the registry, run it.
 */

import type { AttentionOptions, AttentionProblem, AttentionResult } from '../backends/problem.js';
import { autoDecision, chooseBackend, runPlanned } from '../backends/registry.js';
import { config } from '../config.js';
import type { Tensor } from '../tensor/tensor.js';
import { validateAttention } from './validate.js';

/**
 * Scaled dot-product attention with the semantics of `jax.nn.dot_product_attention`, returning the
 * output together with the backend and kernel variant that produced it (and the log-sum-exp when
 * `returnLogSumExp` is set).
 *
 *   out[b,t,n,:] = Σ_s softmax_s(scale · q[b,t,n,:]·k[b,s,n/(N/K),:] + bias[b,n,t,s]) · v[b,s,n/(N/K),:]
 *
 * query (B,T,N,H), key (B,S,K,H), value (B,S,K,Hv), N % K == 0; rank-3 inputs (T,N,H) are accepted.
 * The output is (B,T,N,Hv) in the query's dtype, on the query's device.
 *
 * @example
 * const q = randomNormal([2, 16, 4, 32], { seed: 1 });
 * const k = randomNormal([2, 16, 2, 32], { seed: 2 });
 * const v = randomNormal([2, 16, 2, 32], { seed: 3 });
 * const { output, backend } = attention(q, k, v, { isCausal: true });
 */
export function attention(
  query: Tensor,
  key: Tensor,
  value: Tensor,
  options: AttentionOptions = {},
): AttentionResult {
  return runAttention(validateAttention(query, key, value, options));
}

/** A problem validateAttention made, on the backend the registry chooses (attention's second half). */
export function runAttention(problem: AttentionProblem): AttentionResult {
  const { backend, plan } = chooseBackend(problem);
  const result = runPlanned(backend, plan, problem);
  // ATTNLAB_DEBUG ≥ 1: which backend and kernel variant ran (config() is read once, then cached).
  if (config().debug >= 1) {
    const { B, T, S, N, K, H } = problem;
    // Which step decided: a calibrated entry, a recorded table of this architecture, or the model.
    const decision = autoDecision(problem);
    const why = decision ? ` (auto, ${decision.source}: ${decision.why})` : '';
    process.stderr.write(
      `[attnlab] ${backend.name} (${backend.device}) ran ${result.variant} for B=${B} T=${T} S=${S} N=${N} K=${K} H=${H} ${problem.dtype}${why}${problem.modifiers ? ` with ${problem.modifiers.label}` : ''}\n`,
    );
  }
  const { T, N, Hv } = problem;
  return {
    output: problem.batched ? result.output : result.output.reshape([T, N, Hv]),
    logSumExp: result.logSumExp && !problem.batched ? result.logSumExp.reshape([T, N]) : result.logSumExp,
    backend: backend.name,
    device: backend.device,
    variant: result.variant,
  };
}

/**
 * Scaled dot-product attention, `jax.nn.dot_product_attention` in TypeScript: returns only the
 * output tensor. See {@link attention} for the formula, shapes and an example.
 */
export function dotProductAttention(
  query: Tensor,
  key: Tensor,
  value: Tensor,
  options: AttentionOptions = {},
): Tensor {
  return attention(query, key, value, options).output;
}
