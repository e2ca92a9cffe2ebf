/**
 * The table of attention backends. `auto` (no implementation named) takes the first entry that runs
 * on the inputs' device and plans the problem, in the order autoDecision gives: a calibrated entry
 * of this GPU (calibrated-dispatch-table.ts), else a recorded benchmark of its architecture
 * (dispatch-table.ts, decode-dispatch-table.ts), else this table's order (the model,
 * device-dispatch-table.ts); a named backend that cannot run the case throws with its reason and never
 * falls back. The chosen backend's plan is what runs (runPlanned), followed by the post-ops its entry
 * declares; nothing is worked out twice.
 */

import { config } from '../config.js';
import { UnsupportedError } from '../errors.js';
import {
  type AttentionBackend,
  type Backend,
  planFor,
  runPlanned,
  unsupported,
  withPostOps,
} from './backend.js';
import { operationOf, type TunedOperation } from './calibrated-dispatch-table.js';
import { cpuFlashBackend } from './cpu/flash.js';
import { cpuReferenceBackend } from './cpu/reference.js';
import { cudnnBackend } from './cuda/cudnn/backend.js';
import { cudaFlashBackend } from './cuda/flash/backend.js';
import { cudaNaiveBackend } from './cuda/naive/backend.js';
import { nanRepair } from './cuda/ops/nan-repair.js';
import { cudaAvailable, currentDeviceOrdinal } from './cuda/runtime/context.js';
import {
  BANDWIDTH_TRANSFER,
  type MeasuredDecodeOrder,
  measuredDecodeOrder,
  tableHasRoom,
} from './decode-dispatch-table.js';
import { type DecisionSource, matchWords, modelWords } from './device-dispatch-table.js';
import { type MeasuredOrder, measuredOrder, orderByMeasurement } from './dispatch-table.js';
import type { AttentionProblem } from './problem.js';
import { RecentDecisions } from './recent-decisions.js';
import {
  calibratedEntry,
  calibrateOnDevice,
  currentDeviceClass,
  type Candidate as Timed,
} from './tuning-registry.js';
import { webgpuBackend } from './webgpu/backend.js';

export { layoutSupport, runPlanned } from './backend.js';

/** Priority order where no measurement speaks for a case: fastest first on each device. */
export const BACKENDS: readonly AttentionBackend[] = [
  cpuFlashBackend,
  cpuReferenceBackend,
  // cuda: cudnn > flash > naive. cuDNN's and cuBLASLt's P·V let a masked key's NaN value through
  // (0 · NaN): the NaN repair post-op recomputes such elements (docs/guide/attention.md, "Rows that
  // see nothing, NaN and Inf"); attnlab's flash kernels hold the rule in their epilogue.
  withPostOps(cudnnBackend, [nanRepair]),
  cudaFlashBackend,
  withPostOps(cudaNaiveBackend, [nanRepair]),
  webgpuBackend,
];

/** The backend that will run `problem` and its plan, or a typed error saying why none can. */
export function chooseBackend(problem: AttentionProblem): Chosen<AttentionBackend> {
  return chooseFrom(backendOrder(problem), problem, '');
}

/** What decided the order `auto` takes for a problem, in words for ATTNLAB_DEBUG and `attnlab info`. */
export interface AutoDecision {
  /** Backend names, fastest first (the rest follow in the table's order). */
  readonly order: readonly string[];
  readonly source: DecisionSource;
  /** e.g. 'calibrated: flash 1.02 ms < cudnn 1.10 ms (B=4 T=8192 …, 2026-12-06)'. */
  readonly why: string;
}

/**
 * BACKENDS in the order `auto` tries them for `problem` (autoDecision); a named backend, or one on
 * the CPU, keeps the table's order.
 */
export function backendOrder(problem: AttentionProblem): readonly AttentionBackend[] {
  if ((problem.paged || problem.packed) && problem.implementation === undefined) return layoutOrder(problem);
  const decision = autoDecision(problem);
  if (!decision || decision.source === 'model') return BACKENDS;
  // Kept with the remembered decision: a repeated call reorders nothing.
  let ordered = orders.get(decision);
  if (!ordered) {
    ordered = orderByMeasurement(BACKENDS, decision.order);
    orders.set(decision, ordered);
  }
  return ordered;
}

const orders = new WeakMap<AutoDecision, readonly AttentionBackend[]>();

/**
 * The order `auto` follows for `problem` on the GPU, and which step decided it: a calibrated entry
 * (calibrating the problem's shape class first under ATTNLAB_TUNE=auto), a recorded table of the
 * GPU's architecture, or the model (the table's order). Null for a named backend or a CPU problem.
 */
export function autoDecision(problem: AttentionProblem): AutoDecision | null {
  // Without a usable GPU every cuda backend refuses with its reason (chooseFrom lists them): no order to choose.
  if (problem.implementation !== undefined || problem.device !== 'cuda' || !cudaAvailable().ok) return null;
  // Remembered per shape: the steps below (shape class, table lookups, the words) cost a call's host time
  // each time, and their answer changes only with the settings or a calibrated table. A dense problem without
  // lengths is found among the last few by its fields (decisionKey's string is ~1 KB of allocation a call).
  if (recent.refresh()) decisions.clear();
  const dense = !problem.paged && !problem.packed && problem.keyValueSeqLengths === null;
  const device = currentDeviceOrdinal();
  if (dense) {
    const found = recent.find(problem, device);
    if (found) return found;
  }
  const key = decisionKey(problem);
  let decision = decisions.get(key);
  if (!decision) {
    decision = decide(problem);
    if (decisions.size >= 1024) decisions.clear();
    decisions.set(key, decision);
  }
  if (dense) recent.remember(problem, device, decision);
  return decision;
}

const decisions = new Map<string, AutoDecision>();
const recent = new RecentDecisions<AutoDecision>();

/** Everything of `p` the three steps read: sizes, dtype, mask, layout, and a decode step's cached tokens. */
function decisionKey(p: AttentionProblem): string {
  let lengths = '';
  if (p.keyValueSeqLengths) {
    let sum = 0;
    let longest = 0;
    for (const l of p.keyValueSeqLengths) {
      sum += l;
      if (l > longest) longest = l;
    }
    lengths = `${sum},${longest}`;
  }
  const paged = p.paged ? `${p.paged.blockSize},${p.paged.maxBlocksPerSeq}` : '';
  return `${currentDeviceOrdinal()}|${p.dtype}|${p.B}|${p.T}|${p.S}|${p.N}|${p.K}|${p.H}|${p.Hv}|${p.causal ? 1 : 0}|${p.alignment}|${p.window ? 1 : 0}|${p.bias ? 1 : 0}|${p.mask ? 1 : 0}|${p.packed ? 1 : 0}|${paged}|${lengths}`;
}

function decide(problem: AttentionProblem): AutoDecision {
  const calibrated = calibratedDecision('forward', problem, BACKENDS);
  if (calibrated) return calibrated;
  const measured = measuredChoice(problem);
  if (measured) {
    const numbers = measured.order.map((name) => `${name} ${measured.measured.tflops[name]}`).join(' > ');
    return {
      order: measured.order,
      source: 'recorded',
      why: `${matchWords(measured.match, measured.table.device)}: ${numbers} TFLOP/s at T=S=${measured.table.shape.T} (${measured.table.source})`,
    };
  }
  const decode = measuredDecodeChoice(problem);
  if (decode) {
    const numbers = decode.order.map((name) => `${name} ${decode.measured.gbs[name]}`).join(' > ');
    return {
      order: decode.order,
      source: 'recorded',
      why: `${matchWords(decode.match, decode.table.device)}: ${numbers} GB/s at B=${decode.measured.B} S=${decode.measured.S} ${decode.measured.layout}${decode.transferred ? ` (${BANDWIDTH_TRANSFER})` : ''}`,
    };
  }
  const order = BACKENDS.filter((b) => b.device === 'cuda').map((b) => b.name);
  return { order, source: 'model', why: modelWords(order) };
}

/** What calibration needs of a table entry: any operation's backend (backend.ts). */
type Calibratable<P> = Backend<P, object>;

/**
 * The calibrated entry for `problem` as a decision, or null. Under ATTNLAB_TUNE=auto a shape class
 * not yet in the table is calibrated now on the problem itself (its inputs are read, never written),
 * within ATTNLAB_TUNE_BUDGET_MS, and saved; with fewer than two backends supporting it there is
 * nothing to choose and nothing is timed.
 */
export function calibratedDecision<P extends AttentionProblem, E extends Calibratable<P>>(
  operation: 'forward' | 'backward',
  problem: P,
  table: readonly E[],
): AutoDecision | null {
  if (!cudaAvailable().ok) return null;
  const op: TunedOperation = operationOf(problem, operation === 'backward');
  const found = calibratedEntry(op, problem);
  if (found) return calibratedWords(found.entry, 'calibrated');
  if (config().tune !== 'auto') return null;
  const candidates = calibrationCandidates(problem, table);
  if (candidates.length < 2) return null;
  const made = calibrateOnDevice(op, problem, candidates, config().tuneBudgetMs);
  return made.entry.order.length > 0 ? calibratedWords(made.entry, 'calibrated now') : null;
}

/** The backends of `table` on the problem's device that take it, as calibration candidates. */
export function calibrationCandidates<P extends AttentionProblem, E extends Calibratable<P>>(
  problem: P,
  table: readonly E[],
): Timed[] {
  const candidates: Timed[] = [];
  for (const b of table) {
    if (b.device !== problem.device) continue;
    const found = planFor(b, problem);
    if (found.ok) candidates.push({ name: b.name, run: () => tensorsOf(runPlanned(b, found.plan, problem)) });
  }
  return candidates;
}

/** The tensors a backend's output holds (forward: output, logSumExp; backward: the gradients). */
function tensorsOf(output: object): Array<{ dispose(): void }> {
  return Object.values(output).filter(
    (v): v is { dispose(): void } => typeof v === 'object' && v !== null && typeof v.dispose === 'function',
  );
}

function calibratedWords(
  entry: { order: readonly string[]; ms: Readonly<Record<string, number>>; measured: string; at: string },
  what: string,
): AutoDecision {
  const numbers = entry.order.map((name) => `${name} ${entry.ms[name].toFixed(3)} ms`).join(' < ');
  return {
    order: entry.order,
    source: 'calibrated',
    why: `${what} on this GPU: ${numbers} (${entry.measured}, ${entry.at.slice(0, 10)})`,
  };
}

/**
 * A paged or packed problem with `implementation` unset: cudnn only where a calibrated entry or the
 * recorded decode table ranks it first for the case (a calibrated entry only with a block table that
 * has room to grow, as the recorded table: cuDNN builds a graph per table width),
 * otherwise the flash decode kernels, which were measured everywhere they run; a call naming
 * 'cudnn' takes these layouts either way.
 */
function layoutOrder(problem: AttentionProblem): readonly AttentionBackend[] {
  const calibrated =
    problem.device === 'cuda' && (!problem.paged || tableHasRoom(problem))
      ? calibratedDecision('forward', problem, BACKENDS)
      : null;
  if (calibrated) return orderByMeasurement(BACKENDS, calibrated.order);
  const measured = measuredDecodeChoice(problem);
  if (measured) return orderByMeasurement(BACKENDS, measured.order);
  return problem.paged ? withoutCudnn.paged : withoutCudnn.packed;
}

/**
 * BACKENDS with cudnn refusing a paged cache or packed sequences, saying why: made once (a call that made
 * them, its closure, spread entry and reason string was ~1 µs of a KVCache step's host time).
 */
const withoutCudnn = {
  paged: refusingCudnn('a paged KV cache'),
  packed: refusingCudnn('packed sequences'),
};

function refusingCudnn(what: string): readonly AttentionBackend[] {
  const refused = unsupported(
    `${what} runs on cudnn with implementation unset only where a calibrated entry or the measured decode ` +
      `table ranks it first (src/backends/decode-dispatch-table.ts); name implementation: 'cudnn' to run it there`,
  );
  return BACKENDS.map((b) => (b.name === 'cudnn' ? { ...b, plan: () => refused } : b));
}

/** The recorded decode measurement `auto` follows for a decode step on a paged or dense cache, or null. */
export function measuredDecodeChoice(problem: AttentionProblem): MeasuredDecodeOrder | null {
  if (problem.implementation !== undefined || problem.device !== 'cuda' || problem.packed) return null;
  return measuredDecodeOrder(problem, currentDeviceClass());
}

/** The recorded measurement `auto` follows for `problem`, or null (a named backend, no record). */
export function measuredChoice(problem: AttentionProblem): MeasuredOrder | null {
  if (problem.implementation !== undefined || problem.device !== 'cuda') return null;
  return measuredOrder(problem, {
    device: currentDeviceClass(),
    // The kernel family the flash backend's plan of this shape runs ('wgmma', 'mma', 'fma').
    flashKernel: () => cudaFlashBackend.family?.(problem) ?? '',
  });
}

/** A backend `chooseFrom` picked, with the plan it made of the problem: run it with runPlanned. */
export interface Chosen<E extends Backend<never, unknown>> {
  readonly backend: E;
  readonly plan: unknown;
}

/**
 * The dispatch rule of every operation's table (forward here, backward in backward-registry.ts, the
 * FP8 step in fp8-registry.ts): a named backend plans the problem or throws UnsupportedError with its
 * reason; unnamed, the first entry on the device whose plan succeeds. `operation` (e.g. ' backward')
 * labels the errors.
 */
export function chooseFrom<P extends AttentionProblem, E extends Backend<P, unknown>>(
  table: readonly E[],
  problem: P,
  operation: string,
): Chosen<E> {
  if (problem.implementation !== undefined) {
    const named = table.find((b) => b.device === problem.device && b.name === problem.implementation);
    if (!named) {
      // A valid problem on the other device: the backend exists but cannot run these inputs.
      const devices = table.filter((b) => b.name === problem.implementation).map((b) => b.device);
      const available = table
        .filter((b) => b.device === problem.device)
        .map((b) => b.name)
        .join(', ');
      throw new UnsupportedError(
        `${problem.implementation}${operation}`,
        devices.length === 0
          ? `${problem.implementation} has no${operation} implementation (on ${problem.device}: ${available})`
          : `${problem.implementation} runs on ${devices.join(' and ')}, the inputs are on ${problem.device} ` +
              `(move them with .to('${devices[0]}'), or pick a ${problem.device} backend: ${available})`,
      );
    }
    const found = planFor(named, problem);
    if (!found.ok) throw new UnsupportedError(`${named.name} (${named.device})${operation}`, found.reason);
    return { backend: named, plan: found.plan };
  }
  // The reasons are joined only when every backend refused: a KVCache step under auto passes cudnn's
  // refusal of its paged cache on every call, and a string and a list made of it cost ~0.5 µs a call.
  let refused: { backend: E; reason: string }[] | null = null;
  let first: E | null = null;
  let firstReason = '';
  for (const backend of table) {
    if (backend.device !== problem.device) continue;
    const found = planFor(backend, problem);
    if (found.ok) return { backend, plan: found.plan };
    if (first === null) {
      first = backend;
      firstReason = found.reason;
    } else (refused ??= []).push({ backend, reason: found.reason });
  }
  const reasons = first === null ? [] : [`${first.name}: ${firstReason}`];
  for (const r of refused ?? []) reasons.push(`${r.backend.name}: ${r.reason}`);
  throw new UnsupportedError(`every ${problem.device} backend${operation}`, reasons.join('; '));
}
