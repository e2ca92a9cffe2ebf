/**
 * The TransformerEngine-style module as a timed call: bf16, or under FP8 autocast with delayed
 * scaling (TE's HYBRID format: E4M3 forward). A sweep group that names a module times it instead of
 * attention() (run-bench.ts), so the FP8 suite is data like the others.
 */

import { autocast } from '../te/autocast.js';
import { DotProductAttention } from '../te/module.js';
import { DelayedScaling } from '../te/recipe.js';
import type { Tensor } from '../tensor/tensor.js';
import type { MeasureOptions } from './measure.js';
import type { BenchCase } from './sweep.js';

/** What a sweep group times in place of attention(): the module in bf16, or under FP8 autocast. */
export type ModuleCall = 'te' | 'te-fp8';
export const MODULE_CALLS: readonly ModuleCall[] = ['te', 'te-fp8'];

/**
 * The measure options that time the module at this case's shape and mask. A new module and recipe
 * per case: delayed scaling keeps amax history, and one case's history must not scale another's.
 */
export function moduleCall(kind: ModuleCall, c: BenchCase): Pick<MeasureOptions, 'call' | 'impl' | 'label'> {
  const module = new DotProductAttention({
    headDim: c.H,
    numAttentionHeads: c.N,
    numGqaGroups: c.K,
    attnMaskType: c.causal ? 'causal' : 'no_mask',
  });
  const mask = c.causal ? ' causal' : '';
  if (kind === 'te') {
    return {
      impl: 'te',
      label: `te bf16${mask}`,
      call: (q: Tensor, k: Tensor, v: Tensor) => module.apply(q, k, v, { deterministic: true }),
    };
  }
  const recipe = new DelayedScaling({
    margin: 0,
    fp8Format: 'HYBRID',
    amaxHistoryLen: 1024,
    amaxComputeAlgo: 'max',
  });
  return {
    impl: 'te-fp8',
    label: `te fp8 autocast${mask}`,
    call: (q: Tensor, k: Tensor, v: Tensor) =>
      autocast({ enabled: true, recipe }, () => module.apply(q, k, v, { deterministic: true })),
  };
}
