/**
 * One execution of a cached plan: bind every non-virtual uid of the graph to a pointer (device
 * memory for tensors, stable host memory for by-value scalars), build the variant pack, enqueue on
 * attnlab's stream (a CUDA graph's launch where the pack repeats, cuda-graph.ts). Nothing here waits
 * for the GPU.
 */

import type { DeviceBuffer } from '../../../tensor/storage.js';
import {
  allocHostScalars,
  createDescriptor,
  destroyDescriptor,
  finalize,
  setAttribute,
} from '../ffi/cudnn.js';
import { ATTR, ATTR_TYPE, DESCRIPTOR } from '../ffi/cudnn-constants.js';
import { copyInt32ToDevice, growingDeviceBuffer } from '../runtime/memory.js';
import {
  enqueuePlan,
  forgetGraphRoute,
  forgetPackGraph,
  type GraphRoute,
  newGraphRoute,
} from './cuda-graph.js';
import type { Binding, MemoryBinding } from './graph-spec.js';
import type { CachedPlan } from './plan.js';

/** Device pointers of one call, by binding kind. */
export type CallPointers = Partial<Record<MemoryBinding, bigint>>;

/** Per-plan arrays made once, so a call only writes pointers into them. */
interface Launch {
  readonly uids: BigInt64Array;
  readonly pointers: BigUint64Array;
  readonly bindings: readonly Binding[];
  readonly scalars: { address: bigint; view: DataView };
  /** Slot index in the scalar memory of the scale, or -1. */
  readonly scaleSlot: number;
  /** Finalized variant packs by their pointers, oldest first (see executePlan). */
  readonly packs: Map<string, bigint>;
  /** The packs' CUDA graphs (cuda-graph.ts). */
  readonly route: GraphRoute;
}

/**
 * Variant packs kept per plan (bf16 and FP8). A finalized pack cannot be changed, but the same
 * pointers recur call after call (the pool hands back the block the previous output used), so
 * reusing the pack saves five backend calls per execute; by-value scalars live in host memory the
 * pack points to.
 */
const PACKS_PER_PLAN = 8;

const launches = new WeakMap<CachedPlan, Launch>();

function launchOf(entry: CachedPlan): Launch {
  const known = launches.get(entry);
  if (known) return known;
  const uids: number[] = [];
  const bindings: Binding[] = [];
  for (const [uid, binding] of entry.spec.bindings) {
    uids.push(uid);
    bindings.push(binding);
  }
  const scalars = allocHostScalars(bindings.length);
  let scaleSlot = -1;
  bindings.forEach((binding, slot) => {
    if (binding.kind === 'scale') scaleSlot = slot;
    if (binding.kind !== 'constant') return;
    if (binding.dtype === 'float') scalars.view.setFloat32(slot * 8, binding.value, true);
    else scalars.view.setInt32(slot * 8, binding.value, true);
  });
  const launch = {
    uids: BigInt64Array.from(uids, BigInt),
    pointers: new BigUint64Array(uids.length),
    bindings,
    scalars,
    scaleSlot,
    packs: new Map<string, bigint>(),
    route: newGraphRoute(),
  };
  launches.set(entry, launch);
  return launch;
}

/**
 * The workspace of every cuDNN plan (bf16 and FP8): one buffer grown to the largest plan's need and
 * kept (growingDeviceBuffer says why sharing it is safe).
 */
const workspace = growingDeviceBuffer();

export function workspacePointer(bytes: number): bigint {
  return bytes === 0 ? 0n : workspace(bytes).ptr;
}

/**
 * Sequence lengths as the INT32 [B,1,1,1] device tensor cuDNN's graphs (bf16 and FP8) read; a side
 * without lengths is every row at `full`.
 */
export function sequenceLengthsBuffer(lengths: Int32Array | null, B: number, full: number): DeviceBuffer {
  return copyInt32ToDevice(lengths ?? new Int32Array(B).fill(full));
}

/**
 * The finalized variant pack binding `uids` to `pointers` (and this workspace), from `packs` when
 * these pointers were seen before; otherwise made and kept, the oldest of PACKS_PER_PLAN dropped
 * (`dropping` is told first, so that nothing outlives its pack).
 */
export function cachedVariantPack(
  packs: Map<string, bigint>,
  uids: BigInt64Array,
  pointers: BigUint64Array,
  workspacePtr: bigint,
  dropping?: (pack: bigint) => void,
): bigint {
  // The pointers of the call before, compared in place: a loop's calls mostly repeat them, and the
  // key string (a join of the pointers) is ~500 B and ~1 µs a call.
  const last = lastPacks.get(packs);
  if (last && last.source === pointers && last.workspace === workspacePtr && sameWords(last.words, last.seen))
    return last.pack;
  const key = `${pointers.join(',')}|${workspacePtr}`;
  const known = packs.get(key);
  if (known !== undefined) {
    lastPacks.set(packs, lastCall(pointers, workspacePtr, known));
    return known;
  }
  const pack = createDescriptor(DESCRIPTOR.VARIANT_PACK);
  try {
    setAttribute(pack, ATTR.VARIANT_PACK_UNIQUE_IDS, ATTR_TYPE.INT64, uids);
    setAttribute(pack, ATTR.VARIANT_PACK_DATA_POINTERS, ATTR_TYPE.VOID_PTR, pointers);
    setAttribute(pack, ATTR.VARIANT_PACK_WORKSPACE, ATTR_TYPE.VOID_PTR, BigUint64Array.of(workspacePtr));
    finalize(pack, 'variant pack');
  } catch (error) {
    destroyDescriptor(pack);
    throw error;
  }
  if (packs.size >= PACKS_PER_PLAN) {
    const [oldestKey, oldest] = packs.entries().next().value as [string, bigint];
    packs.delete(oldestKey);
    dropping?.(oldest);
    destroyDescriptor(oldest);
  }
  packs.set(key, pack);
  lastPacks.set(packs, lastCall(pointers, workspacePtr, pack));
  return pack;
}

/**
 * Per pack set, the pack of its last call: the pointer array it was given (a plan's launch reuses one),
 * 32-bit words over it and a copy of them then, so that a repeated call compares numbers (reading a
 * BigUint64Array makes a bigint per element). Never a destroyed pack: cachedVariantPack sets it after
 * every eviction, forgetLaunch drops the set.
 */
interface LastCall {
  readonly source: BigUint64Array;
  readonly words: Uint32Array;
  readonly seen: Uint32Array;
  readonly workspace: bigint;
  readonly pack: bigint;
}
const lastPacks = new WeakMap<Map<string, bigint>, LastCall>();

function lastCall(pointers: BigUint64Array, workspace: bigint, pack: bigint): LastCall {
  const words = new Uint32Array(pointers.buffer, pointers.byteOffset, pointers.length * 2);
  return { source: pointers, words, seen: words.slice(), workspace, pack };
}

function sameWords(now: Uint32Array, seen: Uint32Array): boolean {
  for (let i = 0; i < now.length; i++) if (now[i] !== seen[i]) return false;
  return true;
}

/** Enqueues the plan with these pointers and this scale on attnlab's stream. */
export function executePlan(entry: CachedPlan, handle: bigint, pointers: CallPointers, scale: number): void {
  const launch = launchOf(entry);
  if (launch.scaleSlot >= 0) launch.scalars.view.setFloat32(launch.scaleSlot * 8, scale, true);
  for (let i = 0; i < launch.bindings.length; i++) {
    const binding = launch.bindings[i];
    if (binding.kind === 'scale' || binding.kind === 'constant') {
      launch.pointers[i] = launch.scalars.address + BigInt(i * 8);
    } else {
      const pointer = pointers[binding.kind];
      if (pointer === undefined)
        throw new Error(`cuDNN plan needs a ${binding.kind} pointer that the call did not give`);
      launch.pointers[i] = pointer;
    }
  }
  const pack = cachedVariantPack(
    launch.packs,
    launch.uids,
    launch.pointers,
    workspacePointer(entry.plan.workspaceBytes),
    (dropped) => forgetPackGraph(launch.route, dropped),
  );
  enqueuePlan(launch.route, handle, entry.plan.plan, pack, scale, entry.variant);
}

/** Destroys the variant packs of a plan that is being dropped from the cache. */
export function forgetLaunch(entry: CachedPlan): void {
  const launch = launches.get(entry);
  if (!launch) return;
  forgetGraphRoute(launch.route);
  for (const pack of launch.packs.values()) destroyDescriptor(pack);
  lastPacks.delete(launch.packs);
  launches.delete(entry);
}
