/**
 * Plans of the FP8 graph, one per Fp8GraphFeatures, kept for the process, and their execution.
 *
 * A plan's first build costs 0.75–1.5 s (cuDNN compiles the FP8 kernel at run time) and 42–85 ms
 * for later shapes in the same process (cudnn-sdpa-verified.md §7.5); a Map lookup afterwards.
 * Plans are not written to disk here: the bf16 backend's disk cache is keyed by its own feature set.
 */
import { UnsupportedError } from '../../../errors.js';
import { cudnnEnvironment } from '../cudnn/backend.js';
import { cachedVariantPack, workspacePointer } from '../cudnn/execute.js';
import { buildPlanForSpec, type ExecutionPlan, kernelNameFromJson, serializePlan } from '../cudnn/plan.js';
import { versionText } from '../cudnn/plan-cache.js';
import { allocHostScalars, check, cudnnHandle, loadCudnn } from '../ffi/cudnn.js';
import {
  buildFp8Graph,
  type Fp8Graph,
  type Fp8GraphFeatures,
  type Fp8MemoryRole,
  type Fp8Role,
} from './graph.js';

export interface Fp8Plan {
  readonly graph: Fp8Graph;
  readonly plan: ExecutionPlan;
  /** "cudnn 9.14.0 fp8 engine 2 cudnn_generated_…_wgmma_f8_…". */
  readonly variant: string;
  /** Variant-pack arrays made once; a call writes pointers into them. */
  readonly uids: BigInt64Array;
  readonly pointers: BigUint64Array;
  readonly roles: readonly Fp8Role[];
  /** Stable host memory for by-value scalars (attention scale, −inf), one 8-byte slot per uid. */
  readonly hostScalars: { address: bigint; view: DataView };
  /**
   * Per uid, worked out once: a by-value scalar's host address, or an FP8 scalar's byte offset in
   * the scalar block (the execute path then does one addition per uid).
   */
  readonly addresses: readonly bigint[];
  /** Finalized variant packs by their pointers (cachedVariantPack). */
  readonly packs: Map<string, bigint>;
  readonly setupMs: number;
}

const plans = new Map<string, Fp8Plan>();

/** The plan for `f`, built on first use; throws UnsupportedError when no cuDNN engine runs it. */
export function fp8Plan(f: Fp8GraphFeatures): Fp8Plan {
  return fp8PlanFor(`forward ${JSON.stringify(f)}`, 'fp8', () => buildFp8Graph(f));
}

/**
 * The plan of an FP8 graph (forward or backward), cached under `key`; `label` names the graph in
 * the variant ("fp8", "fp8 backward").
 */
export function fp8PlanFor(key: string, label: string, build: () => Fp8Graph): Fp8Plan {
  const env = cudnnEnvironment();
  if (!env.ok) throw new UnsupportedError(`cudnn-${label.replace(' ', '-')}`, env.reason);
  const known = plans.get(key);
  if (known) return known;
  const started = performance.now();
  const handle = cudnnHandle();
  const graph = build();
  // The graph's descriptors stay alive with the plan (for the process), as cudnn-frontend keeps them.
  const { plan } = buildPlanForSpec(graph.spec, handle);
  const kernel = kernelNameFromJson(serializePlan(plan.plan)) ?? 'kernel name not in plan';
  const nonVirtual = graph.spec.tensors.filter((t) => !t.virtual);
  const roles = nonVirtual.map((t) => {
    const role = graph.roles.get(t.uid);
    if (!role) throw new Error(`FP8 graph: tensor ${t.name} (uid ${t.uid}) has no role`);
    return role;
  });
  const hostScalars = allocHostScalars(nonVirtual.length);
  const addresses = roles.map((role, i) => {
    if (role.kind === 'negativeInfinity') hostScalars.view.setFloat32(i * 8, Number.NEGATIVE_INFINITY, true);
    if (role.kind === 'attnScale' || role.kind === 'negativeInfinity')
      return hostScalars.address + BigInt(i * 8);
    return role.kind === 'scalar' ? BigInt(role.slot * 16) : 0n;
  });
  const entry: Fp8Plan = {
    graph,
    plan,
    variant: `cudnn ${versionText(env.env.version)} ${label} engine ${plan.engine} ${kernel}`,
    uids: BigInt64Array.from(nonVirtual, (t) => BigInt(t.uid)),
    pointers: new BigUint64Array(nonVirtual.length),
    roles,
    hostScalars,
    addresses,
    packs: new Map(),
    setupMs: performance.now() - started,
  };
  plans.set(key, entry);
  return entry;
}

/**
 * Device pointers of one call: each memory role the graph has (the forward's Q8, K8, V8, O8, the
 * statistics when kept, lengths when padded; the backward's dO8, dQ8, dK8, dV8 too), and the scalar
 * block its scalar slots are offsets into.
 */
export type Fp8Pointers = { readonly [role in Fp8MemoryRole]?: bigint } & { readonly scalarBlock: bigint };

/** Enqueues the plan on attnlab's stream (cuDNN's handle is bound to it); nothing waits. */
export function executeFp8Plan(entry: Fp8Plan, pointers: Fp8Pointers, attnScale: number): void {
  const { roles, addresses, pointers: bound } = entry;
  for (let i = 0; i < roles.length; i++) {
    const role = roles[i];
    switch (role.kind) {
      case 'attnScale':
        entry.hostScalars.view.setFloat32(i * 8, attnScale, true);
        bound[i] = addresses[i];
        break;
      case 'negativeInfinity':
        bound[i] = addresses[i];
        break;
      case 'scalar':
        bound[i] = pointers.scalarBlock + addresses[i];
        break;
      default: {
        const pointer = pointers[role.kind];
        if (pointer === undefined)
          throw new Error(`FP8 plan needs a ${role.kind} pointer that the call did not give`);
        bound[i] = pointer;
      }
    }
  }
  const pack = cachedVariantPack(
    entry.packs,
    entry.uids,
    entry.pointers,
    workspacePointer(entry.plan.workspaceBytes),
  );
  check(
    `cudnnBackendExecute (FP8 SDPA${entry.variant.includes('backward') ? ' backward' : ''})`,
    loadCudnn().fn.cudnnBackendExecute(cudnnHandle(), entry.plan.plan, pack),
  );
}
