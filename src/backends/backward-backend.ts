/**
 * What a backward backend is: the one backend contract (backend.ts: plan, run, post-ops) for the
 * backward operation. Backends implement it and the backward table (backward-registry.ts) lists them.
 */
import type { Backend } from './backend.js';
import type { BackwardOutput, BackwardProblem } from './backward-problem.js';
import type { Implementation } from './problem.js';

export interface BackwardBackend<Plan = unknown> extends Backend<BackwardProblem, BackwardOutput, Plan> {
  readonly name: Implementation;
}
