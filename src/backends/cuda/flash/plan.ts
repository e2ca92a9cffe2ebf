/**
 * A flash forward call's per-shape work, done once per shape and kept: the variant (Hopper or
 * mma.sync), its key, its kernel, the launch geometry and the launch parameters packed to bytes. A
 * call then only writes its buffers' addresses into the bytes (and the Hopper kernel's tensor maps
 * when Q, K or V moved) and launches them as one copy. On the stand-in device the parameters alone
 * took ~15 µs a call (the Hopper struct of 704 bytes as ~90 fields: 9.5 µs to lay out, 3 to build the
 * flash fields, 4 to launch), the variant choice ~1.5 µs more.
 *
 * Plain problems only — no bias, no mask (their strides come with the tensors), no score/mask
 * modifiers or block mask: the others take the general path. A plan is keyed by everything of the
 * problem that reaches the variant or the parameters, and by the device; a config() reloaded
 * (ATTNLAB_FLASH_KERNEL, tiles) drops every plan. The flash backend's plan() takes a kept plan as
 * proof of every check that depends on the shape alone (backend.ts, planFlash).
 */
import { config } from '../../../config.js';
import { type AttentionProblem, type ShapeFields, sameShapeFields, shapeFields } from '../../problem.js';
import { type CompiledModule, loadKernels } from '../runtime/compile.js';
import { currentDeviceOrdinal, getCudaContext, targetArch } from '../runtime/context.js';
import { type KernelArg, type LaunchConfig, packStruct } from '../runtime/launch.js';
import { kernelPrelude } from './modifiers.js';
import { buildFlashParams, type FlashPointers, marshalFlashParams } from './params.js';
import {
  type FlashVariant,
  flashDefines,
  flashKernelSource,
  flashVariant,
  flashVariantKey,
  flashVariantSharedBytes,
} from './sm80/variant.js';
import { hopperTensorMaps, marshalHopperParams } from './sm90/hopper.js';
import {
  HOPPER_KERNEL,
  type HopperVariant,
  hopperDefines,
  hopperGrid,
  hopperSharedBytes,
  hopperThreads,
  hopperVariant,
  hopperVariantKey,
} from './sm90/hopper-variant.js';

/** Compiles (or fetches from the caches) the module of `variant`. */
export function flashModule(variant: FlashVariant): CompiledModule {
  const { file, name } = flashKernelSource(variant);
  return loadKernels({
    file,
    kernels: [name],
    defines: flashDefines(variant),
    prelude: kernelPrelude(variant.modifiers),
  });
}

/** The CUfunction of `variant`'s kernel. */
export function flashKernel(variant: FlashVariant): bigint {
  return flashModule(variant).functions.get(flashKernelSource(variant).name)!;
}

/** The CUfunction of the Hopper kernel's variant `v`. */
function hopperKernel(v: HopperVariant): bigint {
  const module = loadKernels({
    file: HOPPER_KERNEL.file,
    kernels: [HOPPER_KERNEL.name],
    defines: hopperDefines(v),
  });
  return module.functions.get(HOPPER_KERNEL.name)!;
}

export interface FlashPlan {
  /** The kernel family: the Hopper kernel, or the mma.sync / float32 FMA kernel of flash_fwd*.cu. */
  readonly family: 'wgmma' | 'mma' | 'fma';
  /** The variant key results report. */
  readonly key: string;
  readonly hopper: HopperVariant | null;
  readonly mma: FlashVariant | null;
  readonly fn: bigint;
  readonly launch: LaunchConfig;
  /** The packed parameters: HopperParams (maps, FlashParams, work counter) or FlashParams. */
  readonly bytes: Uint8Array;
  readonly view: DataView;
  /** Byte offset of FlashParams' nine pointers (q, k, v, o, lse, bias, mask, qLens, kvLens). */
  readonly pointersAt: number;
  /** Byte offset of the Hopper work counter, or -1. */
  readonly counterAt: number;
  /** The Q, K, V addresses the tensor maps in `bytes` were made for (Hopper). */
  mapsFor: [bigint, bigint, bigint];
}

const plans = new Map<string, FlashPlan>();
/** More shapes than a model's layers use; past it the oldest plan goes. */
const PLAN_CACHE_SIZE = 256;
let plansConfig: unknown = null;

/** The plan's key for `p`, or null where the general path runs (bias, mask). */
function planKey(p: AttentionProblem): string | null {
  // Score/mask modifiers and block masks specialise the kernel too: not a plain problem.
  if (p.bias || p.mask || p.modifiers || p.blockMask) return null;
  const w = p.window ? `${p.window.left},${p.window.right}` : '';
  return `${currentDeviceOrdinal()}|${p.dtype}|${p.B}|${p.T}|${p.S}|${p.N}|${p.K}|${p.H}|${p.Hv}|${p.causal ? 1 : 0}|${p.alignment}|${w}|${p.scale}|${p.returnLogSumExp ? 1 : 0}|${p.querySeqLengths ? 1 : 0}|${p.keyValueSeqLengths ? 1 : 0}`;
}

/** The fields of a plain problem a plan depends on (planKey's parts), kept without its tensors. */
interface PlanFields {
  readonly device: number;
  readonly shape: ShapeFields;
  readonly qLens: boolean;
  readonly kvLens: boolean;
}

function planFields(p: AttentionProblem, device: number): PlanFields {
  return {
    device,
    shape: shapeFields(p),
    qLens: p.querySeqLengths !== null,
    kvLens: p.keyValueSeqLengths !== null,
  };
}

/** Whether `p` on `device` has the fields `f` (a plain problem). */
function matches(f: PlanFields, p: AttentionProblem, device: number): boolean {
  return (
    f.device === device &&
    sameShapeFields(f.shape, p) &&
    f.qLens === (p.querySeqLengths !== null) &&
    f.kvLens === (p.keyValueSeqLengths !== null)
  );
}

/**
 * The plans of the last few shapes, most recent first, with the fields they were made for: a repeated
 * shape is found by comparing fields, with no key string made (planKey's ~1 KB of strings a call is
 * more than the rest of a small flash call allocates).
 */
const recent: Array<{ readonly plan: FlashPlan; readonly fields: PlanFields }> = [];
const RECENT_PLANS = 4;

function remembered(plan: FlashPlan, p: AttentionProblem): FlashPlan {
  const at = recent.findIndex((r) => r.plan === plan);
  if (at >= 0) recent.splice(at, 1);
  recent.unshift({ plan, fields: planFields(p, currentDeviceOrdinal()) });
  if (recent.length > RECENT_PLANS) recent.pop();
  return plan;
}

/** The plan of `p` if its shape ran before (nothing is made), else null. */
export function keptFlashPlan(p: AttentionProblem): FlashPlan | null {
  if (p.bias || p.mask || p.modifiers || p.blockMask) return null;
  if (config() !== plansConfig) return null;
  const device = currentDeviceOrdinal();
  for (let i = 0; i < recent.length; i++) if (matches(recent[i].fields, p, device)) return recent[i].plan;
  const key = planKey(p);
  const known = key === null ? undefined : plans.get(key);
  return known ? remembered(known, p) : null;
}

/** The plan of `p` (made on its first call), or null where the general path runs. */
export function flashPlan(p: AttentionProblem): FlashPlan | null {
  const key = planKey(p);
  if (key === null) return null;
  const settings = config();
  if (settings !== plansConfig) {
    plans.clear();
    recent.length = 0;
    plansConfig = settings;
  }
  const known = plans.get(key);
  if (known) return remembered(known, p);
  const made = makePlan(p);
  if (plans.size >= PLAN_CACHE_SIZE) {
    const oldest = plans.keys().next().value as string;
    const dropped = plans.get(oldest);
    plans.delete(oldest);
    const at = recent.findIndex((r) => r.plan === dropped);
    if (at >= 0) recent.splice(at, 1);
  }
  plans.set(key, made);
  return remembered(made, p);
}

const NO_POINTERS: FlashPointers = {
  q: 0n,
  k: 0n,
  v: 0n,
  o: 0n,
  lse: 0n,
  bias: 0n,
  mask: 0n,
  qLens: 0n,
  kvLens: 0n,
};

function packed(arg: KernelArg): { bytes: Uint8Array; view: DataView; offsets: number[] } {
  if (arg.type !== 'struct') throw new TypeError('a struct argument');
  return packStruct(arg.fields);
}

function makePlan(p: AttentionProblem): FlashPlan {
  const arch = targetArch();
  const found = hopperVariant(p, arch);
  const flashFields = marshalFlashParams(buildFlashParams(p, NO_POINTERS));
  if ('variant' in found) {
    const v = found.variant;
    const maps = hopperTensorMaps(p, v, 0n, 0n, 0n);
    const { bytes, view, offsets } = packed(marshalHopperParams(maps, flashFields, 0n));
    // Fields: 3 maps × 16 words, then FlashParams, then the work counter.
    const flashCount = flashFields.type === 'struct' ? flashFields.fields.length : 0;
    return {
      family: 'wgmma',
      key: hopperVariantKey(v),
      hopper: v,
      mma: null,
      fn: hopperKernel(v),
      launch: {
        grid: hopperGrid(v, p.T, p.B * p.N, getCudaContext().properties.multiprocessorCount),
        block: [hopperThreads(v), 1, 1],
        sharedBytes: hopperSharedBytes(v),
      },
      bytes,
      view,
      pointersAt: offsets[48],
      counterAt: v.persistent === 'dynamic' ? offsets[48 + flashCount] : -1,
      mapsFor: [0n, 0n, 0n],
    };
  }
  const v = flashVariant(p, arch);
  const { bytes, view, offsets } = packed(flashFields);
  return {
    family: v.kernel,
    key: flashVariantKey(v),
    hopper: null,
    mma: v,
    fn: flashKernel(v),
    launch: {
      grid: [Math.ceil(p.T / v.tiles.blockM), p.B * p.N, 1],
      block: [v.tiles.warps * 32, 1, 1],
      sharedBytes: flashVariantSharedBytes(v),
    },
    bytes,
    view,
    pointersAt: offsets[0],
    counterAt: -1,
    mapsFor: [0n, 0n, 0n],
  };
}

/** Writes this call's addresses (and, where Q, K or V moved, the Hopper tensor maps) into the plan's bytes. */
export function fillPlan(
  plan: FlashPlan,
  p: AttentionProblem,
  pointers: FlashPointers,
  counter: bigint,
): void {
  const { view, pointersAt: at } = plan;
  // FlashParams' nine pointers in declaration order (params.ts), written one by one (no list a call).
  view.setBigUint64(at, pointers.q, true);
  view.setBigUint64(at + 8, pointers.k, true);
  view.setBigUint64(at + 16, pointers.v, true);
  view.setBigUint64(at + 24, pointers.o, true);
  view.setBigUint64(at + 32, pointers.lse, true);
  view.setBigUint64(at + 40, pointers.bias, true);
  view.setBigUint64(at + 48, pointers.mask, true);
  view.setBigUint64(at + 56, pointers.qLens, true);
  view.setBigUint64(at + 64, pointers.kvLens, true);
  if (plan.counterAt >= 0) view.setBigUint64(plan.counterAt, counter, true);
  if (plan.hopper) {
    const [q, k, v] = plan.mapsFor;
    if (q !== pointers.q || k !== pointers.k || v !== pointers.v) {
      const maps = hopperTensorMaps(p, plan.hopper, pointers.q, pointers.k, pointers.v);
      maps.forEach((map, i) => {
        plan.bytes.set(new Uint8Array(map.buffer, map.byteOffset, map.byteLength), 128 * i);
      });
      plan.mapsFor = [pointers.q, pointers.k, pointers.v];
    }
  }
}
