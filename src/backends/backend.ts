/**
 * What an attention backend is: a name, a device, a cheap `supports` check and `run`. Backends
 * implement it and the registry (registry.ts) lists them; both import this module, and the registry
 * imports the backends, never the reverse.
 */

import type { Device } from '../tensor/storage.js';
import type { AttentionProblem, BackendOutput, Implementation } from './problem.js';

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

/**
 * Input forms beyond dense tensors a backend may take: a paged KV cache, packed sequences, and score/mask
 * modifiers with their block mask (src/variants/).
 */
export type InputLayout = 'paged' | 'packed' | 'modifiers';

/** Whether `backend` takes the problem's layout, before asking its supports(). */
export function layoutSupport(backend: AttentionBackend, problem: AttentionProblem): Support {
  return takesLayout(backend.layouts, problem);
}

/** Whether a table entry declaring `layouts` takes the problem's paged or packed inputs. */
export function takesLayout(layouts: readonly InputLayout[] | undefined, problem: AttentionProblem): Support {
  const taken = layouts ?? [];
  if (problem.paged && !taken.includes('paged')) {
    return unsupported('a paged KV cache (blockTable) is not taken by this backend');
  }
  if (problem.packed && !taken.includes('packed')) {
    return unsupported('packed sequences (querySeqOffsets/keyValueSeqOffsets) are not taken by this backend');
  }
  if ((problem.modifiers || problem.blockMask) && !taken.includes('modifiers')) {
    return unsupported('score/mask modifiers (scoreMod, maskMod, blockMask) are not taken by this backend');
  }
  return SUPPORTED;
}
