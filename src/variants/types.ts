/**
 * The modifier contract between the variants API and the kernels (docs/internals/variants.md): what a
 * modifier set compiles to, what a block mask holds, and what the backends receive on the problem.
 */

import type { Device } from '../tensor/storage.js';
import type { Tensor } from '../tensor/tensor.js';

/** A captured tensor in kernel-slot order, as the launchers marshal AttnlabCaptures. */
export interface CaptureDescriptor {
  readonly name: string;
  readonly tensor: Tensor;
  readonly dtype: 'int32' | 'float32';
  /** Whether its gradient is computed (a learned float32 tensor read by the score modifier). */
  readonly needsGrad: boolean;
  /** Element strides of its indices (row-major, 0 on a dimension of size 1: broadcast), padded to 4. */
  readonly strides: readonly [number, number, number, number];
}

/**
 * A score and/or mask modifier compiled once per call: the CUDA device functions for the kernels and
 * elementwise evaluators for the CPU backends, both from the same checked expression.
 */
export interface CompiledModifiers {
  /** Stable hash of cudaSource: part of every kernel cache key. */
  readonly key: string;
  /** Hash of the mask modifier's function alone (a BlockMask is tied to it); '' without one. */
  readonly maskKey: string;
  /** The device functions and ATTNLAB_* macros, prepended to a kernel's source before NVRTC compiles it. */
  readonly cudaSource: string;
  /** Captured tensors in kernel-slot order (at most 8). */
  readonly captures: readonly CaptureDescriptor[];
  readonly hasScoreMod: boolean;
  readonly hasMaskMod: boolean;
  /** Whether any capture needs its gradient (ATTNLAB_CAPTURE_GRADS). */
  readonly hasCaptureGrads: boolean;
  /** The modifiers as written, for errors and ATTNLAB_DEBUG lines: "scoreMod alibi: …; maskMod causal: …". */
  readonly label: string;
  /** The score after the score modifier, in float64 (the CPU backends). */
  scoreMod?(s: number, b: number, h: number, q: number, kv: number): number;
  /**
   * g · d(scoreMod)/ds at (s, b, h, q, kv); adds g · d(scoreMod)/d(capture element) into
   * `captureGrads[slot]` (a Float64Array of the capture's size) for each capture that needs its gradient.
   */
  scoreModGrad?(
    s: number,
    g: number,
    b: number,
    h: number,
    q: number,
    kv: number,
    captureGrads: readonly Float64Array[],
  ): number;
  /** Whether the mask modifier keeps (b, h, q, kv). */
  maskMod?(b: number, h: number, q: number, kv: number): boolean;
}

/** A block's kind in BlockMask.kinds. */
export const BLOCK_EMPTY = 0;
export const BLOCK_PARTIAL = 1;
export const BLOCK_FULL = 2;

/**
 * A mask modifier evaluated at block granularity by createBlockMask: one byte per (b, h, query block,
 * key block), 0 = empty (the kernels skip it), 1 = partial (evaluate maskMod per element), 2 = full
 * (maskMod keeps every element; the built-in masks still apply per element). Computed once, reused
 * across layers and steps.
 */
export interface BlockMask {
  readonly B: number;
  readonly N: number;
  readonly T: number;
  readonly S: number;
  readonly blockQ: number;
  readonly blockKV: number;
  /** 1 when the mask does not read b (stored once for every batch), else B. */
  readonly Bm: number;
  /** 1 when the mask does not read h, else N. */
  readonly Nm: number;
  readonly qBlocks: number;
  readonly kvBlocks: number;
  /** [Bm, Nm, qBlocks, kvBlocks] bytes (dtype 'bool' is attnlab's one-byte storage; values 0, 1, 2). */
  readonly kinds: Tensor;
  /** The CompiledModifiers.maskKey of the mask it was made from. */
  readonly maskKey: string;
  readonly device: Device;
}
