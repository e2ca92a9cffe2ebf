/**
 * What a backward backend is: the forward's shape (backend.ts) for the backward operation. Backends
 * implement it and the backward table (backward-registry.ts) lists them.
 */
import type { Device } from '../tensor/storage.js';
import type { InputLayout, Support } from './backend.js';
import type { BackwardOutput, BackwardProblem } from './backward-problem.js';
import type { Implementation } from './problem.js';

export interface BackwardBackend {
  readonly name: Implementation;
  readonly device: Device;
  /** Input forms beyond dense tensors it takes (as the forward's backends declare them): 'modifiers'. */
  readonly layouts?: readonly InputLayout[];
  /** Whether this backend can differentiate the problem, or why not. Cheap: called on every dispatch. */
  supports(problem: BackwardProblem): Support;
  run(problem: BackwardProblem): BackwardOutput;
}
