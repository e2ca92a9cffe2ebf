/**
 * Plans of the FP8 graph, one per Fp8GraphFeatures, kept for the process, and their execution.
 *
 * A plan's first build costs 0.75–1.5 s (cuDNN compiles the FP8 kernel at run time) and 42–85 ms
 * for later shapes in the same process (cudnn-sdpa-verified.md §7.5); a Map lookup afterwards.
 * Plans are not written to disk here: the bf16 backend's disk cache is keyed by its own feature set.
 */
import { UnsupportedError } from '../../../api/errors.js';
import { cudnnEnvironment } from '../cudnn/backend.js';
import { workspacePointer } from '../cudnn/execute.js';
import { buildPlanForSpec, type ExecutionPlan, kernelNameFromJson, serializePlan } from '../cudnn/plan.js';
import { versionText } from '../cudnn/plan-cache.js';
import {
  allocHostScalars,
  check,
  createDescriptor,
  cudnnHandle,
  destroyDescriptor,
  finalize,
  loadCudnn,
  setAttribute,
} from '../ffi/cudnn.js';
import { ATTR, ATTR_TYPE, DESCRIPTOR } from '../ffi/cudnn-constants.js';
import { buildFp8Graph, type Fp8Graph, type Fp8GraphFeatures, type Fp8Role } from './graph.js';

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
  readonly setupMs: number;
}

const plans = new Map<string, Fp8Plan>();

/** The plan for `f`, built on first use; throws UnsupportedError when no cuDNN engine runs it. */
export function fp8Plan(f: Fp8GraphFeatures): Fp8Plan {
  const env = cudnnEnvironment();
  if (!env.ok) throw new UnsupportedError('cudnn-fp8', env.reason);
  const key = JSON.stringify(f);
  const known = plans.get(key);
  if (known) return known;
  const started = performance.now();
  const handle = cudnnHandle();
  const graph = buildFp8Graph(f);
  // The graph's descriptors stay alive with the plan (for the process), as cudnn-frontend keeps them.
  const { plan } = buildPlanForSpec(graph.spec, handle);
  const kernel = kernelNameFromJson(serializePlan(plan.plan)) ?? 'kernel name not in plan';
  const nonVirtual = graph.spec.tensors.filter((t) => !t.virtual);
  const roles = nonVirtual.map((t) => {
    const role = graph.roles.get(t.uid);
    if (!role) throw new Error(`FP8 graph: tensor ${t.name} (uid ${t.uid}) has no role`);
    return role;
  });
  const entry: Fp8Plan = {
    graph,
    plan,
    variant: `cudnn ${versionText(env.env.version)} fp8 engine ${plan.engine} ${kernel}`,
    uids: BigInt64Array.from(nonVirtual, (t) => BigInt(t.uid)),
    pointers: new BigUint64Array(nonVirtual.length),
    roles,
    hostScalars: allocHostScalars(nonVirtual.length),
    setupMs: performance.now() - started,
  };
  plans.set(key, entry);
  return entry;
}

/** Device pointers of one call. */
export interface Fp8Pointers {
  readonly q8: bigint;
  readonly k8: bigint;
  readonly v8: bigint;
  readonly o8: bigint;
  readonly scalarBlock: bigint;
  readonly seqLenQ?: bigint;
  readonly seqLenKv?: bigint;
}

/** Enqueues the plan on attnlab's stream (cuDNN's handle is bound to it); nothing waits. */
export function executeFp8Plan(entry: Fp8Plan, pointers: Fp8Pointers, attnScale: number): void {
  const { view, address } = entry.hostScalars;
  entry.roles.forEach((role, i) => {
    switch (role.kind) {
      case 'attnScale':
      case 'negativeInfinity':
        view.setFloat32(i * 8, role.kind === 'attnScale' ? attnScale : Number.NEGATIVE_INFINITY, true);
        entry.pointers[i] = address + BigInt(i * 8);
        return;
      case 'scalar':
        entry.pointers[i] = pointers.scalarBlock + BigInt(role.slot * 16);
        return;
      default: {
        const pointer = pointers[role.kind];
        if (pointer === undefined)
          throw new Error(`FP8 plan needs a ${role.kind} pointer that the call did not give`);
        entry.pointers[i] = pointer;
      }
    }
  });
  const pack = createDescriptor(DESCRIPTOR.VARIANT_PACK);
  try {
    setAttribute(pack, ATTR.VARIANT_PACK_UNIQUE_IDS, ATTR_TYPE.INT64, entry.uids);
    setAttribute(pack, ATTR.VARIANT_PACK_DATA_POINTERS, ATTR_TYPE.VOID_PTR, entry.pointers);
    setAttribute(
      pack,
      ATTR.VARIANT_PACK_WORKSPACE,
      ATTR_TYPE.VOID_PTR,
      BigUint64Array.of(workspacePointer(entry.plan.workspaceBytes)),
    );
    finalize(pack, 'FP8 variant pack');
    check(
      'cudnnBackendExecute (FP8 SDPA)',
      loadCudnn().fn.cudnnBackendExecute(cudnnHandle(), entry.plan.plan, pack),
    );
  } finally {
    destroyDescriptor(pack);
  }
}
