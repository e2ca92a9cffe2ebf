/**
 * What `attnlab bench --pass` times for attnlab: the forward (attention()), the backward alone
 * (attentionVjp once per input set, untimed, then backward(dO) per call, like jax.vjp's pullback
 * or PyTorch's autograd.grad with retain_graph), or forward and backward in one call. The flops of
 * a row scale with PASS_FLOPS (backward 2.5× the forward's).
 */
import { attentionVjp } from '../api/backward.js';
import { problemFlops } from '../backends/problem.js';
import { PASS_FLOPS, type Pass, type ResultRow } from '../results/schema.js';
import type { Tensor } from '../tensor/tensor.js';
import type { BenchCase } from './sweep.js';

/** A row's floating-point work: the forward's, times its pass's factor. */
export function rowFlops(row: Pick<ResultRow, 'B' | 'T' | 'S' | 'N' | 'H' | 'causal' | 'pass'>): number {
  return problemFlops(row) * PASS_FLOPS[row.pass ?? 'forward'];
}

export type TimedCall = (set: Tensor[]) => { output: Tensor; variant: string };

/**
 * The call to time for a backward pass over input sets [q, k, v, dO]: residuals are made on a set's
 * first use and kept until `dispose`. Only dQuery is handed back (the caller disposes it).
 */
export function backwardCall(
  c: BenchCase,
  pass: Exclude<Pass, 'forward'>,
): { call: TimedCall; dispose(): void } {
  const options = { implementation: c.impl, isCausal: c.causal };
  const residuals = new Map<Tensor, ReturnType<typeof attentionVjp>>();
  const call: TimedCall = ([q, k, v, dO]) => {
    let f = pass === 'backward' ? residuals.get(q) : undefined;
    if (!f) {
      f = attentionVjp(q, k, v, options);
      if (pass === 'backward') residuals.set(q, f);
    }
    const g = f.backward(dO);
    for (const t of [g.dKey, g.dValue, g.dBias]) t?.dispose();
    if (pass === 'forward+backward') {
      f.output.dispose();
      f.logSumExp.dispose();
      return { output: g.dQuery, variant: `${f.variant} | ${g.variant}` };
    }
    return { output: g.dQuery, variant: g.variant };
  };
  const dispose = () => {
    for (const f of residuals.values())
      for (const t of [f.output, f.logSumExp]) if (t.device !== 'cpu') t.dispose();
    residuals.clear();
  };
  return { call, dispose };
}
