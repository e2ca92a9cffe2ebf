/**
 * Score/mask modifiers and block masks on the CUDA flash kernels (src/kernels/common/modifiers.cuh):
 * what the mma.sync forward and backward read from a problem's compiled modifier set and block mask,
 * the two by-value kernel parameters they become (AttnlabCaptures, AttnlabBlockMask), and what the
 * kernels refuse.
 *
 * The problem carries `modifiers` (CompiledModifiers: its key, its generated CUDA source, the captured
 * tensors) and `blockMask` (uint8 kinds per block pair: 0 empty, 1 partial, 2 full) from the variants
 * API (src/variants/types.ts); this module reads only the fields below.
 */
import type { CompiledModifiers } from '../../../variants/types.js';
import type { KernelArg, ScalarType } from '../runtime/launch.js';

/** The kernels take at most this many captured tensors (AttnlabCaptures' arrays). */
export const MAX_CAPTURES = 8;
/** … each indexed by at most this many expressions (its rank). */
export const MAX_CAPTURE_RANK = 4;

/** The compiled modifier set, as the kernels see it (key, cudaSource, captures, hasScoreMod, hasMaskMod). */
export type FlashModifiers = CompiledModifiers;

/** A block mask over (Bm, Nm, ceil(T/blockQ), ceil(S/blockKV)) block pairs, Bm ∈ {1, B}, Nm ∈ {1, N}. */
export interface FlashBlockMask {
  /** uint8 kinds on the device, row-major: a DeviceBuffer or a (cuda) Tensor holding one. */
  readonly kinds:
    | { readonly ptr: bigint }
    | { readonly buffer: { readonly ptr: bigint }; readonly device?: string };
  readonly Bm: number;
  readonly Nm: number;
  readonly blockQ: number;
  readonly blockKV: number;
}

export interface WithVariants {
  readonly modifiers?: FlashModifiers | null;
  readonly blockMask?: FlashBlockMask | null;
}

/** The problem's modifier set, or null. */
export function modifiersOf(p: object): FlashModifiers | null {
  return (p as WithVariants).modifiers ?? null;
}

/** The problem's block mask, or null. */
export function blockMaskOf(p: object): FlashBlockMask | null {
  return (p as WithVariants).blockMask ?? null;
}

/** Whether the kernels need the modifier parameters (ATTNLAB_MODIFIERS in modifiers.cuh). */
export function hasVariants(p: object): boolean {
  return modifiersOf(p) !== null || blockMaskOf(p) !== null;
}

/** The prelude NVRTC compiles before the kernel source (KernelSpec.prelude), with its cache key; undefined without modifiers. */
export function kernelPrelude(m: FlashModifiers | null): { key: string; source: string } | undefined {
  return m ? { key: m.key, source: m.cudaSource } : undefined;
}

/** Why the flash kernels cannot take the problem's modifiers and block mask, or null. */
export function variantsRule(
  p: WithVariants & { readonly B: number; readonly N: number; readonly T: number; readonly S: number },
): string | null {
  const m = modifiersOf(p);
  if (m) {
    if (m.captures.length > MAX_CAPTURES) {
      return `${m.captures.length} captured tensors: the kernels take at most ${MAX_CAPTURES}`;
    }
    for (const c of m.captures) {
      if (c.tensor.rank > MAX_CAPTURE_RANK) {
        return `captured tensor ${c.name} of rank ${c.tensor.rank}: the kernels index at most ${MAX_CAPTURE_RANK} dims`;
      }
      if (c.tensor.device !== 'cuda') {
        return `captured tensor ${c.name} is on the ${c.tensor.device}: the kernels read it on the GPU`;
      }
    }
  }
  const bm = blockMaskOf(p);
  if (bm) {
    if ((bm.Bm !== 1 && bm.Bm !== p.B) || (bm.Nm !== 1 && bm.Nm !== p.N)) {
      return `block mask of ${bm.Bm}×${bm.Nm} (batch × heads) for B=${p.B}, N=${p.N}: each must be 1 or the full size`;
    }
    // A Tensor names its device ('cpu', 'cuda'); a DeviceBuffer's `device` is an ordinal, on the GPU.
    const where = 'device' in bm.kinds ? bm.kinds.device : undefined;
    if (typeof where === 'string' && where !== 'cuda') {
      return `block mask on the ${where}: the kernels read its kinds on the GPU (create it with its tensors there)`;
    }
    if (!(bm.blockQ >= 1 && bm.blockKV >= 1)) {
      return `block mask blocks ${bm.blockQ}×${bm.blockKV}: positive sizes expected`;
    }
  }
  return null;
}

/**
 * AttnlabCaptures, field for field: ptr[8], stride[8][4], grad[8]. `grads[i]` is capture i's float32
 * gradient buffer (backward, needsGrad) or 0n; `pointers` the captures' device addresses (by default
 * their tensors' buffers).
 */
export function marshalCaptures(
  m: FlashModifiers | null,
  grads: readonly bigint[] = [],
  pointers: readonly bigint[] = (m?.captures ?? []).map((c) => c.tensor.buffer.ptr),
): KernelArg {
  const captures = m?.captures ?? [];
  const fields: Array<{ type: ScalarType; value: number | bigint }> = [];
  for (let i = 0; i < MAX_CAPTURES; i++) fields.push({ type: 'ptr', value: pointers[i] ?? 0n });
  for (let i = 0; i < MAX_CAPTURES; i++) {
    // The element strides of the index expressions the generated source reads capture i with.
    const strides = i < captures.length ? captures[i].strides : [0, 0, 0, 0];
    for (const value of strides) fields.push({ type: 'i64', value });
  }
  for (let i = 0; i < MAX_CAPTURES; i++) fields.push({ type: 'ptr', value: grads[i] ?? 0n });
  return { type: 'struct', fields };
}

/** AttnlabBlockMask, field for field, for a problem of T queries and S keys (all zeros without one). */
export function marshalBlockMask(bm: FlashBlockMask | null, T: number, S: number): KernelArg {
  const ptr = bm ? ('ptr' in bm.kinds ? bm.kinds.ptr : bm.kinds.buffer.ptr) : 0n;
  const nq = bm ? Math.ceil(T / bm.blockQ) : 0;
  const nkv = bm ? Math.ceil(S / bm.blockKV) : 0;
  const strideH = bm && bm.Nm > 1 ? nq * nkv : 0;
  const strideB = bm && bm.Bm > 1 ? bm.Nm * nq * nkv : 0;
  return {
    type: 'struct',
    fields: [
      { type: 'ptr', value: ptr },
      { type: 'i64', value: strideB },
      { type: 'i64', value: strideH },
      { type: 'i32', value: bm?.blockQ ?? 1 },
      { type: 'i32', value: bm?.blockKV ?? 1 },
      { type: 'i32', value: nq },
      { type: 'i32', value: nkv },
    ],
  };
}
