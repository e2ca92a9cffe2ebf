/**
 * The table of attention backends. `auto` (no implementation named) takes the first entry that runs
 * on the inputs' device and supports the problem, in this order or, where the GPU's recorded
 * benchmark measured the case, fastest first (dispatch-table.ts); a named backend that cannot run the
 * case throws with its reason and never falls back.
 */
import { UnsupportedError } from '../errors.js';
import type { Device } from '../tensor/storage.js';
import {
  type AttentionBackend,
  type InputLayout,
  type Support,
  takesLayout,
  unsupported,
} from './backend.js';
import { cpuFlashBackend } from './cpu/flash.js';
import { cpuReferenceBackend } from './cpu/reference.js';
import { getCudaContext, targetArch } from './cuda/context.js';
import { cudnnBackend } from './cuda/cudnn/backend.js';
import { cudaFlashBackend } from './cuda/flash/backend.js';
import { hopperVariant } from './cuda/flash/hopper-variant.js';
import { withNanRepair } from './cuda/flash/nan-repair.js';
import { cudaNaiveBackend } from './cuda/naive/backend.js';
import { type MeasuredDecodeOrder, measuredDecodeOrder } from './decode-dispatch-table.js';
import { type MeasuredOrder, measuredOrder, orderByMeasurement } from './dispatch-table.js';
import type { AttentionProblem } from './problem.js';
import { webgpuBackend } from './webgpu/backend.js';

export { layoutSupport } from './backend.js';

/** Priority order where no measurement speaks for a case: fastest first on each device. */
export const BACKENDS: readonly AttentionBackend[] = [
  cpuFlashBackend,
  cpuReferenceBackend,
  // cuda: cudnn > flash > naive. cuDNN's and cuBLASLt's P·V let a masked key's NaN value through
  // (0 · NaN): the repair recomputes such elements (README, "Rows that see nothing, NaN and Inf").
  withNanRepair(cudnnBackend),
  cudaFlashBackend,
  withNanRepair(cudaNaiveBackend),
  webgpuBackend,
];

/** The backend that will run `problem`, or a typed error saying why none can. */
export function chooseBackend(problem: AttentionProblem): AttentionBackend {
  return chooseFrom(backendOrder(problem), problem, '');
}

/**
 * BACKENDS in the order `auto` tries them for `problem`: on a GPU with a recorded benchmark of this
 * case (dispatch-table.ts for prefill, decode-dispatch-table.ts for a decode step on a dense cache),
 * the measured backends fastest first; otherwise the table's order.
 */
export function backendOrder(problem: AttentionProblem): readonly AttentionBackend[] {
  if ((problem.paged || problem.packed) && problem.implementation === undefined) return layoutOrder(problem);
  const measured = measuredChoice(problem)?.order ?? measuredDecodeChoice(problem)?.order;
  return measured ? orderByMeasurement(BACKENDS, measured) : BACKENDS;
}

/**
 * A paged or packed problem with `implementation` unset: cudnn only where the measured decode table
 * ranks it first for the case (decode-dispatch-table.ts: paged decode steps at K=8 on the H200, with
 * a block table that has room to grow),
 * otherwise the flash decode kernels, which were measured everywhere they run; a call naming
 * 'cudnn' takes these layouts either way.
 */
function layoutOrder(problem: AttentionProblem): readonly AttentionBackend[] {
  const measured = measuredDecodeChoice(problem);
  if (measured) return orderByMeasurement(BACKENDS, measured.order);
  const what = problem.paged ? 'a paged KV cache' : 'packed sequences';
  const refused = unsupported(
    `${what} runs on cudnn with implementation unset only where the measured decode table ranks it first ` +
      `(src/backends/decode-dispatch-table.ts); name implementation: 'cudnn' to run it there`,
  );
  return BACKENDS.map((b) => (b.name === 'cudnn' ? { ...b, supports: () => refused } : b));
}

/** The recorded decode measurement `auto` follows for a decode step on a paged or dense cache, or null. */
export function measuredDecodeChoice(problem: AttentionProblem): MeasuredDecodeOrder | null {
  if (problem.implementation !== undefined || problem.device !== 'cuda' || problem.packed) return null;
  return measuredDecodeOrder(problem, getCudaContext().properties.name);
}

/** The recorded measurement `auto` follows for `problem`, or null (a named backend, no record). */
export function measuredChoice(problem: AttentionProblem): MeasuredOrder | null {
  if (problem.implementation !== undefined || problem.device !== 'cuda') return null;
  const { properties } = getCudaContext();
  return measuredOrder(problem, {
    gpu: properties.name,
    flashKernel: () => ('variant' in hopperVariant(problem, targetArch(properties)) ? 'wgmma' : 'mma'),
  });
}

/** What `chooseFrom` needs of a table entry: any operation's backend has these. */
interface Candidate<P> {
  /** An Implementation, or an FP8 backend's name (fp8-registry.ts). */
  readonly name: string;
  readonly device: Device;
  readonly layouts?: readonly InputLayout[];
  supports(problem: P): Support;
}

/**
 * The dispatch rule of every operation's table (forward here, backward in backward-registry.ts): a
 * named backend runs or throws UnsupportedError with its reason; unnamed, the first entry on the
 * device that supports the problem. `operation` (e.g. ' backward') labels the errors.
 */
export function chooseFrom<P extends AttentionProblem, E extends Candidate<P>>(
  table: readonly E[],
  problem: P,
  operation: string,
): E {
  const supportOf = (backend: E): Support => {
    const layout = takesLayout(backend.layouts, problem);
    return layout.ok ? backend.supports(problem) : layout;
  };
  const onDevice = table.filter((b) => b.device === problem.device);
  if (problem.implementation !== undefined) {
    const named = onDevice.find((b) => b.name === problem.implementation);
    if (!named) {
      // A valid problem on the other device: the backend exists but cannot run these inputs.
      const devices = table.filter((b) => b.name === problem.implementation).map((b) => b.device);
      const available = onDevice.map((b) => b.name).join(', ');
      throw new UnsupportedError(
        `${problem.implementation}${operation}`,
        devices.length === 0
          ? `${problem.implementation} has no${operation} implementation (on ${problem.device}: ${available})`
          : `${problem.implementation} runs on ${devices.join(' and ')}, the inputs are on ${problem.device} ` +
              `(move them with .to('${devices[0]}'), or pick a ${problem.device} backend: ${available})`,
      );
    }
    const support = supportOf(named);
    if (!support.ok)
      throw new UnsupportedError(`${named.name} (${named.device})${operation}`, support.reason);
    return named;
  }
  const reasons: string[] = [];
  for (const backend of onDevice) {
    const support = supportOf(backend);
    if (support.ok) return backend;
    reasons.push(`${backend.name}: ${support.reason}`);
  }
  throw new UnsupportedError(`every ${problem.device} backend${operation}`, reasons.join('; '));
}
