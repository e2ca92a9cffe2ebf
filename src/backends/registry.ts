/**
 * The table of attention backends. `auto` (no implementation named) takes the first entry, in this
 * order, that runs on the inputs' device and supports the problem; a named backend that cannot run
 * the case throws with its reason and never falls back.
 */
import { InvalidArgumentError, UnsupportedError } from '../api/errors.js';
import type { AttentionProblem, BackendOutput, Implementation } from '../api/problem.js';
import type { Device } from '../tensor/storage.js';
import { cpuFlashBackend } from './cpu/flash.js';
import { cpuReferenceBackend } from './cpu/reference.js';
import { cudnnBackend } from './cuda/cudnn/backend.js';
import { cudaFlashBackend } from './cuda/flash/backend.js';
import { cudaNaiveBackend } from './cuda/naive/backend.js';

export type Support = { readonly ok: true } | { readonly ok: false; readonly reason: string };

export const SUPPORTED: Support = { ok: true };
export function unsupported(reason: string): Support {
  return { ok: false, reason };
}

export interface AttentionBackend {
  readonly name: Implementation;
  readonly device: Device;
  /**
   * The non-dense input layouts it takes (paged KV cache, packed sequences); the registry refuses
   * the others for it with the reason, so supports() sees only layouts it declared.
   */
  readonly layouts?: readonly InputLayout[];
  /** Whether this backend can run the problem, or why not. Cheap: called on every dispatch. */
  supports(problem: AttentionProblem): Support;
  run(problem: AttentionProblem): BackendOutput;
}

export type InputLayout = 'paged' | 'packed';

/** Whether `backend` takes the problem's layout, before asking its supports(). */
export function layoutSupport(backend: AttentionBackend, problem: AttentionProblem): Support {
  const taken = backend.layouts ?? [];
  if (problem.paged && !taken.includes('paged')) {
    return unsupported('a paged KV cache (blockTable) is not taken by this backend');
  }
  if (problem.packed && !taken.includes('packed')) {
    return unsupported('packed sequences (querySeqOffsets/keyValueSeqOffsets) are not taken by this backend');
  }
  return SUPPORTED;
}

function supportOf(backend: AttentionBackend, problem: AttentionProblem): Support {
  const layout = layoutSupport(backend, problem);
  return layout.ok ? backend.supports(problem) : layout;
}

/** Priority order: fastest first on each device. */
export const BACKENDS: readonly AttentionBackend[] = [
  cpuFlashBackend,
  cpuReferenceBackend,
  // cuda: cudnn > flash > naive
  cudnnBackend,
  cudaFlashBackend,
  cudaNaiveBackend,
];

/** The backend that will run `problem`, or a typed error saying why none can. */
export function chooseBackend(problem: AttentionProblem): AttentionBackend {
  const onDevice = BACKENDS.filter((b) => b.device === problem.device);
  if (problem.implementation !== undefined) {
    const named = onDevice.find((b) => b.name === problem.implementation);
    if (!named) {
      const available = onDevice.map((b) => b.name).join(', ');
      throw new InvalidArgumentError(
        'implementation',
        `a backend that runs on ${problem.device} (${available})`,
        JSON.stringify(problem.implementation),
      );
    }
    const support = supportOf(named, problem);
    if (!support.ok) throw new UnsupportedError(`${named.name} (${named.device})`, support.reason);
    return named;
  }
  const reasons: string[] = [];
  for (const backend of onDevice) {
    const support = supportOf(backend, problem);
    if (support.ok) return backend;
    reasons.push(`${backend.name}: ${support.reason}`);
  }
  throw new UnsupportedError(`every ${problem.device} backend`, reasons.join('; '));
}
