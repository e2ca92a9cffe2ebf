/**
 * The FP8 step's table, beside the forward's (registry.ts) and the backward's: the same contract
 * (backend.ts: plan, run) and dispatch rule (chooseFrom). The module (te/) asks it for the backend of the problem's device; a case
 * neither supports throws UnsupportedError with the reasons.
 */
import { NO_PLAN, type Support } from './backend.js';
import { runFp8BackwardEmulated } from './cpu/fp8-backward-emulation.js';
import { runFp8Emulated } from './cpu/fp8-emulation.js';
import { cudnnEnvironment } from './cuda/cudnn/backend.js';
import { cudnnFp8Backend } from './cuda/fp8/backend.js';
import { runCudaFp8Backward } from './cuda/fp8/backward-run.js';
import { fp8BackwardSupport } from './cuda/fp8/backward-support.js';
import { fp8Support } from './cuda/fp8/support.js';
import type { Fp8Backend } from './fp8-backend.js';
import type { Fp8BackwardOutput, Fp8BackwardProblem } from './fp8-backward-problem.js';
import type { Fp8StepProblem } from './fp8-problem.js';
import type { AttentionProblem } from './problem.js';
import { type Chosen, chooseFrom } from './registry.js';

/** On the CPU the step is emulated; it refuses what the GPU graph would, so a case tried there holds on a GPU. */
const cpuFp8EmulatedBackend: Fp8Backend<null> = {
  name: 'cpu-fp8-emulated',
  device: 'cpu',
  plan(p) {
    const support = fp8Support(p, 'emulated');
    return support.ok ? NO_PLAN : support;
  },
  run: (_plan, p) => runFp8Emulated(p),
};

/** One entry per device. */
export const FP8_BACKENDS: readonly Fp8Backend[] = [cpuFp8EmulatedBackend, cudnnFp8Backend];

/** The FP8 backend that will run `problem` and its plan, or a typed error saying why none can. */
export function chooseFp8Backend(problem: Fp8StepProblem): Chosen<Fp8Backend> {
  return chooseFrom(FP8_BACKENDS, problem, ' FP8');
}

/**
 * Whether the FP8 backward can run `p` where its tensors are: the CPU emulation under Hopper's
 * rules, or cuDNN's graph under the loaded cuDNN's and this GPU's.
 */
export function fp8BackwardSupportFor(p: AttentionProblem, scaling: 'delayed' | 'current'): Support {
  if (p.device === 'cpu') return fp8BackwardSupport(p, 'emulated', scaling, null);
  const e = cudnnEnvironment();
  if (!e.ok) return { ok: false, reason: e.reason };
  return fp8BackwardSupport(p, e.env.computeCapability, scaling, e.env.version);
}

/** The FP8 backward on the device of the forward's tensors (after fp8BackwardSupportFor said yes). */
export function runFp8Backward(b: Fp8BackwardProblem): Fp8BackwardOutput {
  return b.problem.device === 'cpu' ? runFp8BackwardEmulated(b) : runCudaFp8Backward(b);
}
