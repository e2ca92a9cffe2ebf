/**
 * What a backend is, for every operation (forward, backward, decode, the FP8 step): a name, a device,
 * `plan(problem)` — can it run the problem, and how (kernel family and variant, launch shapes, cached
 * library plans) — and `run(plan, problem)`, which executes that plan on the problem's tensors without
 * working the case out again. cudnn-frontend's order is the model: validate (api/), check support and
 * build the plan once, execute it. Fix-up passes a backend's output needs (the NaN repair) are post-ops
 * the table entry declares and the registry runs after `run`.
 *
 * Backends implement it and the registries (registry.ts, backward-registry.ts, fp8-registry.ts) list
 * them; both import this module, and the registries import the backends, never the reverse.
 */

import type { Device } from '../tensor/storage.js';
import type { AttentionProblem, BackendOutput, Implementation } from './problem.js';

export type Support = { readonly ok: true } | { readonly ok: false; readonly reason: string };

export const SUPPORTED: Support = { ok: true };
export function unsupported(reason: string): Support & { readonly ok: false } {
  return { ok: false, reason };
}

/** A backend's answer to a problem: the plan it runs it with, or why it cannot. */
export type Planned<Plan> =
  | { readonly ok: true; readonly plan: Plan }
  | { readonly ok: false; readonly reason: string };

/** `plan` as an accepted answer. */
export function planned<Plan>(plan: Plan): Planned<Plan> {
  return { ok: true, plan };
}

/** The answer of a backend whose run needs nothing worked out beforehand (the CPU backends). */
export const NO_PLAN: Planned<null> = { ok: true, plan: null };

/**
 * A pass the registry runs on a backend's output after its run, for the problems it `applies` to:
 * the NaN repair (cuda/ops/nan-repair.ts) after cuDNN's and cuBLASLt's P·V. It enqueues on the
 * current stream, in order after the backend's kernels, and writes the output in place.
 */
export interface PostOp<P, O> {
  readonly name: string;
  /** Whether the pass can change anything for `problem`; cheap, asked on every call. */
  applies(problem: P): boolean;
  run(problem: P, output: O): void;
}

/** One operation's backend: `P` the validated problem (it holds the tensors), `O` what a run returns. */
export interface Backend<P, O, Plan = unknown> {
  readonly name: string;
  readonly device: Device;
  /**
   * The non-dense input layouts it takes (paged KV cache, packed sequences); the registry refuses
   * the others for it with the reason, so plan() sees only layouts it declared.
   */
  readonly layouts?: readonly InputLayout[];
  /** Whether this backend can run the problem and how, or why not. Called on every dispatch. */
  plan(problem: P): Planned<Plan>;
  /** Runs `plan` (from this backend's plan() of this very problem) on the problem's tensors. */
  run(plan: Plan, problem: P): O;
  /** Passes the registry runs on the output after run (registry.ts, runPlanned). */
  readonly postOps?: readonly PostOp<P, O>[];
  /**
   * The kernel family its plan of a dense problem of this shape runs (the flash backend: 'wgmma',
   * 'mma', 'fma'), from the shape alone: the registry's measured dispatch, remembered per shape,
   * counts a recorded table's rows of this backend only where they measured the same family.
   */
  family?(problem: P): string;
}

export interface AttentionBackend<Plan = unknown> extends Backend<AttentionProblem, BackendOutput, Plan> {
  readonly name: Implementation;
}

/**
 * Input forms beyond dense tensors a backend may take: a paged KV cache, packed sequences, and score/mask
 * modifiers with their block mask (src/variants/).
 */
export type InputLayout = 'paged' | 'packed' | 'modifiers';

/** Whether `backend` takes the problem's layout, before asking its plan(). */
export function layoutSupport(
  backend: Backend<AttentionProblem, unknown>,
  problem: AttentionProblem,
): Support {
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

/** `backend`'s plan for `problem`, its layout checked first: what every dispatch asks. */
export function planFor<P extends AttentionProblem, Plan>(
  backend: Backend<P, unknown, Plan>,
  problem: P,
): Planned<Plan> {
  const layout = takesLayout(backend.layouts, problem);
  return layout.ok ? backend.plan(problem) : layout;
}

/** Whether `backend` can run `problem` (its layout and its plan), or why not. */
export function supports<P extends AttentionProblem>(backend: Backend<P, unknown>, problem: P): Support {
  const found = planFor(backend, problem);
  return found.ok ? SUPPORTED : found;
}

/** Runs a plan of `backend` on `problem`, then the post-ops its entry declares. */
export function runPlanned<P, O, Plan>(backend: Backend<P, O, Plan>, plan: Plan, problem: P): O {
  const output = backend.run(plan, problem);
  const postOps = backend.postOps;
  if (postOps) for (const op of postOps) if (op.applies(problem)) op.run(problem, output);
  return output;
}

/** Plans and runs `problem` on `backend`, throwing `refused(reason)` where it cannot (tests, benchmarks, forced paths). */
export function planAndRun<P extends AttentionProblem, O>(
  backend: Backend<P, O>,
  problem: P,
  refused: (reason: string) => Error,
): O {
  const found = planFor(backend, problem);
  if (!found.ok) throw refused(found.reason);
  return runPlanned(backend, found.plan, problem);
}

/** `backend` with `postOps` after its own: the declaration a table entry makes. */
export function withPostOps<P, O, Plan, B extends Backend<P, O, Plan>>(
  backend: B & Backend<P, O, Plan>,
  postOps: readonly PostOp<P, O>[],
): B {
  return { ...backend, postOps: [...(backend.postOps ?? []), ...postOps] };
}
