/**
 * The CPU reference backward: the gradients of softmax(Q·Kᵀ·scale + bias)·V transcribed directly,
 * float64 throughout, one query row at a time (formulas in src/api/backward-problem.ts). It is the
 * oracle of every other backward backend, and is itself checked against central finite differences.
 *
 * As an oracle it trusts nothing computed in lower precision: it recomputes each row's softmax from
 * Q, K and the bias (through the forward's own row loop, rows.ts) and takes D = Σ P·dP from that
 * softmax rather than dO·O from the given output, so the given output and log-sum-exp are unused.
 * Each row's gradients (row-gradients.ts, shared with the plain baseline of src/check/gradients.ts)
 * follow the NaN rule for gradients stated there: D is NaN exactly when the forward output row is,
 * keys of weight 0 add nothing to dV and dS, a NaN row reaches every key the boolean mask leaves it,
 * and a row that sees nothing contributes nothing.
 */

import { allocFloat64 } from '../../tensor/checks.js';
import { NO_PLAN } from '../backend.js';
import type { BackwardBackend } from '../backward-backend.js';
import type { BackwardOutput, BackwardProblem } from '../backward-problem.js';
import type { AttentionProblem } from '../problem.js';
import { gradientTensors } from './gradients.js';
import { gradientSums } from './row-gradients.js';
import { forEachRow } from './rows.js';

export function referenceBackward(p: BackwardProblem): BackwardOutput {
  return gradientTensors(p, gradientSums(p), 'cpu-reference-backward-f64');
}

/**
 * Each row's log-sum-exp in float64 (B,T,N), −inf for a row that sees nothing: the residual the CPU
 * keeps for float64 inputs, where the forward's float32 log-sum-exp would cost 8 digits.
 */
export function exactLogSumExp(p: AttentionProblem): Float64Array {
  const { T, N } = p;
  const lse = allocFloat64([p.B, T, N]).fill(Number.NEGATIVE_INFINITY);
  forEachRow(p, p.query.toFloat64Array(), p.key.toFloat64Array(), ({ b, n, i, lo, hi, max, logits }) => {
    if (max === Number.NEGATIVE_INFINITY) return;
    let sum = 0;
    for (let j = lo; j < hi; j++) sum += Math.exp(logits[j] - max);
    lse[(b * T + i) * N + n] = max + Math.log(sum);
  });
  return lse;
}

export const cpuReferenceBackward: BackwardBackend = {
  name: 'reference',
  device: 'cpu',
  layouts: ['modifiers'],
  plan: () => NO_PLAN,
  run: (_plan, p) => referenceBackward(p),
};
