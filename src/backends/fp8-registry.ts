/**
 * The FP8 step's table, beside the forward's (registry.ts) and the backward's: the same dispatch
 * rule (chooseFrom). The module (te/) asks it for the backend of the problem's device; a case
 * neither supports throws UnsupportedError with the reasons.
 */
import { runFp8Emulated } from './cpu/fp8-emulation.js';
import { cudnnFp8Backend } from './cuda/fp8/backend.js';
import { fp8Support } from './cuda/fp8/support.js';
import type { Fp8Backend } from './fp8-backend.js';
import type { Fp8StepProblem } from './fp8-problem.js';
import { chooseFrom } from './registry.js';

/** On the CPU the step is emulated; it refuses what the GPU graph would, so a case tried there holds on a GPU. */
const cpuFp8EmulatedBackend: Fp8Backend = {
  name: 'cpu-fp8-emulated',
  device: 'cpu',
  supports: (p) => fp8Support(p, 'emulated'),
  run: runFp8Emulated,
};

/** One entry per device. */
export const FP8_BACKENDS: readonly Fp8Backend[] = [cpuFp8EmulatedBackend, cudnnFp8Backend];

/** The FP8 backend that will run `problem`, or a typed error saying why none can. */
export function chooseFp8Backend(problem: Fp8StepProblem): Fp8Backend {
  return chooseFrom(FP8_BACKENDS, problem, ' FP8');
}
