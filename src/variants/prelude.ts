/**
 * What a kernel built with modifiers needs from the problem: the source to prepend (modifier functions,
 * the block-mask switch and struct), its cache key, and the by-value parameters' field values.
 */

import type { Tensor } from '../tensor/tensor.js';
import { hashText } from './compile.js';
import { blockMaskSource } from './cuda.js';
import type { BlockMask, CompiledModifiers } from './types.js';

export interface ModifierPrelude {
  /** Prepended to the kernel's source before NVRTC compiles it. */
  readonly source: string;
  /** Part of the kernel's variant and compile-cache key: changes with any modifier or with the block mask's presence. */
  readonly key: string;
}

/**
 * The prelude of a kernel for a problem's modifiers and block mask, or null when it has neither (the
 * kernel then compiles exactly as without modifiers). A block mask is a run-time parameter: only its
 * presence (ATTNLAB_BLOCK_MASK) is in the source, so one compiled kernel serves every block mask.
 */
export function modifierPrelude(
  modifiers: CompiledModifiers | undefined,
  blockMask: BlockMask | undefined,
): ModifierPrelude | null {
  if (!modifiers) return null;
  const source = `${modifiers.cudaSource}${blockMaskSource(blockMask !== undefined)}`;
  return { source, key: `mod-${hashText(source)}` };
}

/** AttnlabCaptures' fields in slot order; `grads` holds the float32 gradient buffers of learned captures (backward). */
export interface CapturesParam {
  readonly tensors: readonly Tensor[];
  /** stride[slot][d] as element counts. */
  readonly strides: readonly (readonly [number, number, number, number])[];
}

export function capturesParam(modifiers: CompiledModifiers): CapturesParam {
  return {
    tensors: modifiers.captures.map((c) => c.tensor),
    strides: modifiers.captures.map((c) => c.strides),
  };
}

/** AttnlabBlockMask's fields (the kinds pointer is blockMask.kinds' device address). */
export function blockMaskParam(m: BlockMask): {
  readonly strideB: number;
  readonly strideH: number;
  readonly blockQ: number;
  readonly blockKV: number;
  readonly qBlocks: number;
  readonly kvBlocks: number;
} {
  const perHead = m.qBlocks * m.kvBlocks;
  return {
    strideB: m.Bm === 1 ? 0 : m.Nm * perHead,
    strideH: m.Nm === 1 ? 0 : perHead,
    blockQ: m.blockQ,
    blockKV: m.blockKV,
    qBlocks: m.qBlocks,
    kvBlocks: m.kvBlocks,
  };
}
