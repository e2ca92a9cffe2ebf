/**
 * The backward operation's table, beside the forward's (registry.ts): the same (operation, backend)
 * keying, the same dispatch rule (chooseFrom). `auto` takes the first entry, in this order, that
 * runs on the inputs' device and supports the problem; a named backend that cannot run it throws
 * UnsupportedError with the reason and never falls back.
 *
 * A new backward backend is one file exporting a BackwardBackend and one line in BACKWARD_BACKENDS,
 * at its priority.
 */
import type { BackwardBackend } from './backward-backend.js';
import type { BackwardProblem } from './backward-problem.js';
import { cpuFlashBackward } from './cpu/flash-backward.js';
import { cpuReferenceBackward } from './cpu/reference-backward.js';
import { cudnnBackward } from './cuda/cudnn/backward.js';
import { cudaFlashBackward } from './cuda/flash/backward.js';
import { cudaNaiveBackward } from './cuda/naive/backward.js';
import { chooseFrom } from './registry.js';

/** Priority order: fastest first on each device. */
export const BACKWARD_BACKENDS: readonly BackwardBackend[] = [
  cpuFlashBackward,
  cpuReferenceBackward,
  // cuda: cudnn > flash (fused, attnlab's own) > naive
  cudnnBackward,
  cudaFlashBackward,
  cudaNaiveBackward,
];

/** The backward backend that will run `problem`, or a typed error saying why none can. */
export function chooseBackwardBackend(problem: BackwardProblem): BackwardBackend {
  return chooseFrom(BACKWARD_BACKENDS, problem, ' backward');
}
