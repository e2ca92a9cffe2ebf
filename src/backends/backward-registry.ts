/**
 * The backward operation's table, beside the forward's (registry.ts): the same (operation, backend)
 * keying, the same contract (backend.ts: plan, run, post-ops) and dispatch rule (chooseFrom). `auto` takes the first entry that runs on the inputs'
 * device and supports the problem, fastest first where this GPU's calibrated table has an entry for
 * the case (calibrating it first under ATTNLAB_TUNE=auto), else where a recorded backward table of the
 * GPU's architecture measured the case (backward-dispatch-table.ts), otherwise in this order (the
 * model); a named backend that cannot run it throws UnsupportedError with the reason and never falls back.
 *
 * A new backward backend is one file exporting a BackwardBackend (plan and run) and one line in
 * BACKWARD_BACKENDS, at its priority.
 */

import { withPostOps } from './backend.js';
import type { BackwardBackend } from './backward-backend.js';
import {
  BACKWARD_DISPATCH_TABLES,
  type BackwardCaseProblem,
  type BackwardDispatchTable,
  backwardWhy,
  measuredBackwardOrder,
} from './backward-dispatch-table.js';
import type { BackwardProblem } from './backward-problem.js';
import { cpuFlashBackward } from './cpu/flash-backward.js';
import { cpuReferenceBackward } from './cpu/reference-backward.js';
import { cudnnBackward } from './cuda/cudnn/backward.js';
import { cudaFlashBackward } from './cuda/flash/sm80/backward.js';
import { cudaNaiveBackward } from './cuda/naive/backward.js';
import { gradientNanRepair } from './cuda/ops/gradient-nan-repair.js';
import { cudaAvailable, currentDeviceOrdinal } from './cuda/runtime/context.js';
import { type DeviceClass, modelWords } from './device-dispatch-table.js';
import { orderByMeasurement } from './dispatch-table.js';
import { RecentDecisions } from './recent-decisions.js';
import { type AutoDecision, type Chosen, calibratedDecision, chooseFrom } from './registry.js';
import { currentDeviceClass } from './tuning-registry.js';
import { webgpuBackward } from './webgpu/backward.js';

/** Priority order: fastest first on each device. */
export const BACKWARD_BACKENDS: readonly BackwardBackend[] = [
  cpuFlashBackward,
  cpuReferenceBackward,
  // cuda: cudnn > flash (fused, attnlab's own) > naive. cuDNN's gradients get the NaN repair
  // (NaN and Inf inputs spread past the rule in its fused kernel); flash and naive hold the rule.
  withPostOps(cudnnBackward, [gradientNanRepair]),
  cudaFlashBackward,
  cudaNaiveBackward,
  // webgpu: the only backward on webgpu tensors
  webgpuBackward,
];

/** The backward backend that will run `problem` and its plan, or a typed error saying why none can. */
export function chooseBackwardBackend(problem: BackwardProblem): Chosen<BackwardBackend> {
  const decision = backwardDecision(problem);
  const table = decision && decision.source !== 'model' ? orderedFor(decision) : BACKWARD_BACKENDS;
  return chooseFrom(table, problem, ' backward');
}

/**
 * Why the model puts cuDNN first for the backward: at B=4 T=S=8192 N=16 bf16 on an H100, in one process
 * with the loops (benchmarks/harnesses/backward-loop-variants.ts), its backward ran 511.9 / 523.4 TFLOP/s
 * (non-causal / causal) at H=128 against flash's wgmma loop 423.2 / 396.1, and 471.6 / 412.2 at H=64
 * against the producer-warpgroup loop's 292.1 / 291.3 (benchmarks/results/h100-sxm/backward/
 * 2026-12-06-ca1a795-loops-h128.txt, 2026-12-06-64ffe4a-loops-h64.txt); 492–533 against 309–316 and
 * 404–438 against 153–175 on the H200 (benchmarks/results/h200/backward/2026-12-01-*). Flash leads
 * nowhere cuDNN runs; the recorded tables (backward-dispatch-table.ts) say the same per measured case, and
 * flash takes what cuDNN refuses.
 */
const BACKWARD_MODEL = "cuDNN's backward ran 1.2–1.6× flash's on the H100 (B=4 T=8192, H=64 and 128)";

/** The model's words: the registry's cuda order and why cuDNN leads it. */
export function backwardModelWords(): string {
  const order = BACKWARD_BACKENDS.filter((b) => b.device === 'cuda').map((b) => b.name);
  return `${modelWords(order)}: ${BACKWARD_MODEL}`;
}

/**
 * What decides the backward order `auto` takes on the GPU — a calibrated entry, a recorded table of the
 * architecture, or the model; null for a named backend or the CPU.
 */
export function backwardDecision(problem: BackwardProblem): AutoDecision | null {
  if (problem.implementation !== undefined || problem.device !== 'cuda' || !cudaAvailable().ok) return null;
  // Remembered for the last few plain problems: the shape class's string, the table lookups and the words
  // cost ~11 µs of a backward call's host time on the build machine, and their answer changes only with the
  // settings or a calibrated table.
  recent.refresh();
  const plain = problem.querySeqLengths === null && problem.keyValueSeqLengths === null && !problem.modifiers;
  const device = currentDeviceOrdinal();
  const found = plain ? recent.find(problem, device, problem.deterministic) : undefined;
  if (found) return found;
  const decision =
    calibratedDecision('backward', problem, BACKWARD_BACKENDS) ??
    recordedBackwardDecision(problem, currentDeviceClass());
  if (plain) recent.remember(problem, device, decision, problem.deterministic);
  return decision;
}

const recent = new RecentDecisions<AutoDecision>();

/** The decision of the recorded tables for `problem` on `device`, or the model's where none speaks. */
export function recordedBackwardDecision(
  problem: BackwardCaseProblem,
  device: DeviceClass,
  tables: readonly BackwardDispatchTable[] = BACKWARD_DISPATCH_TABLES,
): AutoDecision {
  const found = measuredBackwardOrder(problem, device, tables);
  if (found) return { order: found.order, source: 'recorded', why: backwardWhy(found) };
  const order = BACKWARD_BACKENDS.filter((b) => b.device === 'cuda').map((b) => b.name);
  return { order, source: 'model', why: backwardModelWords() };
}

/** BACKWARD_BACKENDS in a decision's order, kept with the decision (remembered above: a repeated call reorders nothing). */
function orderedFor(decision: AutoDecision): readonly BackwardBackend[] {
  let ordered = orders.get(decision);
  if (!ordered) {
    ordered = orderByMeasurement(BACKWARD_BACKENDS, decision.order);
    orders.set(decision, ordered);
  }
  return ordered;
}
const orders = new WeakMap<AutoDecision, readonly BackwardBackend[]>();
