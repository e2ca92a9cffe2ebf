/**
 * The variant key of the CUDA flash kernels: everything that specialises their source at compile
 * time. The same key labels the compiled module in the cache, the `variant` of results, and
 * benchmark rows. Sizes, strides, causality, window and lengths stay run-time values (FlashParams).
 *
 * Two kernels share FlashParams and the visibility rules: `mma` (flash_fwd.cu, bf16/fp16 on tensor
 * cores) and `fma` (flash_fwd_f32.cu, float32 with float32 FMAs: true float32 precision).
 */
import type { AttentionProblem } from '../../../problem.js';
import { blockMaskOf, type FlashModifiers, modifiersOf } from '../modifiers.js';
import { chooseFlashTiles, type FlashTiles, paddedHeadDim } from './tiles.js';

/** Bias element types the kernels decode (the FLASH_BIAS code). */
export const FLASH_BIAS_CODES = { none: 0, float32: 1, bfloat16: 2, float16: 3 } as const;
export type FlashBiasType = keyof typeof FLASH_BIAS_CODES;

export interface FlashVariant {
  readonly kernel: 'mma' | 'fma';
  /** sm_80, sm_90a, …: the NVRTC target. */
  readonly arch: string;
  readonly dtype: 'bfloat16' | 'float16' | 'float32';
  /** Head dim padded to a multiple of 16 (mma) or 32 (fma: 32 lanes share the output columns). */
  readonly headDim: number;
  readonly tiles: FlashTiles;
  readonly bias: FlashBiasType;
  readonly mask: boolean;
  /** The score/mask modifier set compiled in (modifiers.ts), or null. */
  readonly modifiers: FlashModifiers | null;
  /** Whether the kernel takes a block mask (ATTNLAB_BLOCK_MASK). */
  readonly blockMask: boolean;
}

/** The float32 kernel's fixed tiles: 8 warps × 4 query rows, 32 keys (one per lane) per tile. */
const FMA_TILES: FlashTiles = { blockM: 32, blockN: 32, warps: 8, stages: 1 };

/** The variant for a problem the backend supports (bf16/fp16/f32 inputs, bias f32/bf16/f16 or none). */
export function flashVariant(p: AttentionProblem, arch: string): FlashVariant {
  const fma = p.dtype === 'float32';
  const headDim = fma ? Math.ceil(Math.max(p.H, p.Hv) / 32) * 32 : paddedHeadDim(p.H, p.Hv);
  return {
    kernel: fma ? 'fma' : 'mma',
    arch,
    dtype: p.dtype as FlashVariant['dtype'],
    headDim,
    tiles: fma ? FMA_TILES : chooseFlashTiles(headDim),
    bias: p.bias ? (p.bias.tensor.dtype as FlashBiasType) : 'none',
    mask: p.mask !== null,
    modifiers: modifiersOf(p),
    blockMask: blockMaskOf(p) !== null,
  };
}

/**
 * e.g. `flash-fwd.sm_90a.bf16.d128.128x64x4`, `….bias-f32.mask`, `flash-fwd.sm_90a.f32.d128.32x32x8.fma`,
 * `….mods-<modifier key>.bmask` with modifiers and a block mask.
 */
export function flashVariantKey(v: FlashVariant): string {
  const short = { bfloat16: 'bf16', float16: 'f16', float32: 'f32', none: '' } as const;
  const { blockM, blockN, warps, stages } = v.tiles;
  const tiles = `${blockM}x${blockN}x${warps}${stages === 2 ? 's2' : ''}`;
  const parts = ['flash-fwd', v.arch, short[v.dtype], `d${v.headDim}`, tiles];
  if (v.kernel === 'fma') parts.push('fma');
  if (v.bias !== 'none') parts.push(`bias-${short[v.bias]}`);
  if (v.mask) parts.push('mask');
  if (v.modifiers) parts.push(`mods-${v.modifiers.key}`);
  if (v.blockMask) parts.push('bmask');
  return parts.join('.');
}

/**
 * The source file (relative to src/kernels), the extern "C" entry of a variant's kernel, and the
 * extern "C" __device__ variable in which the compiled kernel states its own shared memory per block
 * (tests read it from the module and compare it with flashVariantSharedBytes).
 */
export function flashKernelSource(v: FlashVariant): {
  file: string;
  name: string;
  sharedBytesSymbol: string;
} {
  const name = v.kernel === 'fma' ? 'attnlab_flash_fwd_f32' : 'attnlab_flash_fwd';
  const file = v.kernel === 'fma' ? 'flash/flash_fwd_f32.cu' : 'flash/flash_fwd.cu';
  return { file, name, sharedBytesSymbol: `${name}_shared_bytes` };
}

/** Dynamic shared memory of one block, in bytes: what the launcher asks for. */
export function flashVariantSharedBytes(v: FlashVariant): number {
  const { blockM, blockN, stages } = v.tiles;
  const D = v.headDim;
  // fma: Q [BM][D], K [BN][D+1], V [BN][D] in float32. mma: Q, then one K and one V tile per stage,
  // each of pitch D+8 in 16 bits (flash_fwd.cu lays out Q | K0 | V0 | K1 | V1). Leaving `stages` out
  // here made two-stage launches write past their shared memory (illegal address on the H200).
  return v.kernel === 'fma'
    ? (blockM * D + blockN * (D + 1) + blockN * D) * 4
    : (blockM + 2 * blockN * stages) * (D + 8) * 2;
}

/** The -D macros that select the variant inside its .cu file. */
export function flashDefines(v: FlashVariant): Record<string, number> {
  const common = {
    FLASH_D: v.headDim,
    FLASH_NW: v.tiles.warps,
    FLASH_BIAS: FLASH_BIAS_CODES[v.bias],
    FLASH_MASK: v.mask ? 1 : 0,
    ...(v.blockMask ? { ATTNLAB_BLOCK_MASK: 1 } : {}),
  };
  if (v.kernel === 'fma') return common;
  return {
    ...common,
    FLASH_BM: v.tiles.blockM,
    FLASH_BN: v.tiles.blockN,
    FLASH_STAGES: v.tiles.stages,
    FLASH_FP16: v.dtype === 'float16' ? 1 : 0,
  };
}
