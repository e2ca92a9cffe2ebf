/**
 * The variant key of the CUDA flash kernel: everything that specialises its source at compile time.
 * The same key labels the compiled module in the cache, the `variant` of results, and benchmark rows.
 * Sizes, strides, causality, window and lengths stay run-time values (FlashParams) and out of the key.
 */
import type { AttentionProblem } from '../../../api/problem.js';
import { chooseFlashTiles, type FlashTiles, paddedHeadDim } from './tiles.js';

/** Bias element types the kernel decodes (the FLASH_BIAS code in flash_fwd.cu). */
export const FLASH_BIAS_CODES = { none: 0, float32: 1, bfloat16: 2, float16: 3 } as const;
export type FlashBiasType = keyof typeof FLASH_BIAS_CODES;

export interface FlashVariant {
  /** sm_80, sm_90a, …: the NVRTC target. */
  readonly arch: string;
  readonly dtype: 'bfloat16' | 'float16';
  /** Head dim padded to a multiple of 16. */
  readonly headDim: number;
  readonly tiles: FlashTiles;
  readonly bias: FlashBiasType;
  readonly mask: boolean;
}

/** The variant for a problem the backend supports (dtype bf16/fp16, bias f32/bf16/f16 or none). */
export function flashVariant(p: AttentionProblem, arch: string): FlashVariant {
  const headDim = paddedHeadDim(p.H, p.Hv);
  return {
    arch,
    dtype: p.dtype as FlashVariant['dtype'],
    headDim,
    tiles: chooseFlashTiles(headDim),
    bias: p.bias ? (p.bias.tensor.dtype as FlashBiasType) : 'none',
    mask: p.mask !== null,
  };
}

/** e.g. `flash-fwd.sm_90a.bf16.d128.128x64x8` or `….bias-f32.mask`. */
export function flashVariantKey(v: FlashVariant): string {
  const short = { bfloat16: 'bf16', float16: 'f16', float32: 'f32', none: '' } as const;
  const { blockM, blockN, warps } = v.tiles;
  const parts = ['flash-fwd', v.arch, short[v.dtype], `d${v.headDim}`, `${blockM}x${blockN}x${warps}`];
  if (v.bias !== 'none') parts.push(`bias-${short[v.bias]}`);
  if (v.mask) parts.push('mask');
  return parts.join('.');
}

/** The -D macros that select the variant inside src/kernels/flash/flash_fwd.cu. */
export function flashDefines(v: FlashVariant): Record<string, number> {
  return {
    FLASH_D: v.headDim,
    FLASH_BM: v.tiles.blockM,
    FLASH_BN: v.tiles.blockN,
    FLASH_NW: v.tiles.warps,
    FLASH_FP16: v.dtype === 'float16' ? 1 : 0,
    FLASH_BIAS: FLASH_BIAS_CODES[v.bias],
    FLASH_MASK: v.mask ? 1 : 0,
  };
}
