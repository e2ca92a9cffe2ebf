/**
 * Which flash problems run on the Hopper kernel (src/kernels/hopper/hopper_fwd.cu: TMA, wgmma,
 * warp specialisation) and with which specialisation. The rule is a pure function of the problem
 * and the compile target, so a CPU test pins it; everything it declines runs on the mma.sync kernel
 * (flash_fwd.cu), which takes every case the flash backend supports.
 *
 * Tiles: 128 query rows per block (two consumer warpgroups of 64) and BN keys per K/V tile, two
 * stages. Harness timings on the H200 (B=4, T=S=8192, N=16, bf16; bench/notes/hopper-kernel.md,
 * run 1), non-causal / causal TFLOP/s:
 *   D=64:  BN=192 365 / 330 against BN=128 334 / 294;
 *   D=128: BN=128 601 / 560 against BN=176 590 / 517 and 561 / 482 without the overlap;
 *   D=256: BN=80  717 / 610 against BN=64  612 / 534.
 */
import { config } from '../../../config.js';
import type { AttentionProblem } from '../../problem.js';

export interface HopperVariant {
  readonly kernel: 'wgmma';
  readonly arch: 'sm_90a';
  readonly dtype: 'bfloat16' | 'float16';
  /** H = Hv: 64, 128 or 256 (whole 64-column TMA boxes of 128 bytes). */
  readonly headDim: 64 | 128 | 256;
  /** Keys per K/V tile. */
  readonly blockN: number;
  readonly stages: 2;
  /** FlashAttention-3's intra-warpgroup overlap of Q·K_{j+1}ᵀ with the softmax of tile j. */
  readonly overlap: boolean;
}

/** The Hopper kernel's query rows per block and threads (one producer and two consumer warpgroups). */
export const HOPPER_BLOCK_M = 128;
export const HOPPER_THREADS = 384;

const BLOCK_N: Record<HopperVariant['headDim'], number> = { 64: 192, 128: 128, 256: 80 };

/**
 * Whether sm_90a runs the Hopper kernel when ATTNLAB_FLASH_KERNEL is unset. Off until the GPU suite
 * has passed on it through the library: the harness checks (100 cases, compute-sanitizer clean) and
 * `attnlab bench` ran it on the H200, but `test:gpu` on it (device run 3) timed out at 200 s before
 * its first result, cause not found (bench/notes/hopper-kernel.md). Flip to true once
 * `ATTNLAB_FLASH_KERNEL=wgmma npm run test:gpu` passes there.
 */
export const HOPPER_BY_DEFAULT = false;

/**
 * The Hopper variant for `p` on target `arch`, or why the mma.sync kernel runs it instead.
 * `kernelChoice` is ATTNLAB_FLASH_KERNEL: 'wgmma' runs the covered cases on the Hopper kernel,
 * 'mma' keeps every case on mma.sync; unset follows HOPPER_BY_DEFAULT.
 */
export function hopperVariant(
  p: AttentionProblem,
  arch: string,
  kernelChoice: string | null | undefined = config().flashKernel,
): { variant: HopperVariant } | { reason: string } {
  if (kernelChoice === 'mma') return { reason: 'ATTNLAB_FLASH_KERNEL=mma' };
  if (kernelChoice !== 'wgmma' && !HOPPER_BY_DEFAULT)
    return { reason: 'the Hopper kernel is opt-in (ATTNLAB_FLASH_KERNEL=wgmma)' };
  if (arch !== 'sm_90a') return { reason: `target ${arch}: wgmma and setmaxnreg need sm_90a` };
  if (p.dtype !== 'bfloat16' && p.dtype !== 'float16') return { reason: `dtype ${p.dtype}` };
  if (p.H !== p.Hv) return { reason: `H=${p.H} ≠ Hv=${p.Hv}` };
  if (p.H !== 64 && p.H !== 128 && p.H !== 256) return { reason: `H=${p.H}: the tiles take 64, 128, 256` };
  if (p.bias) return { reason: 'additive bias' };
  if (p.mask) return { reason: 'boolean mask' };
  if (p.window) return { reason: 'local window' };
  if (p.paged || p.packed) return { reason: 'paged or packed layout' };
  // 16-byte aligned Q, K, V (TMA's rule for global addresses): flashSupport already requires it.
  const headDim = p.H as HopperVariant['headDim'];
  return {
    variant: {
      kernel: 'wgmma',
      arch: 'sm_90a',
      dtype: p.dtype,
      headDim,
      blockN: BLOCK_N[headDim],
      stages: 2,
      overlap: true,
    },
  };
}

/** e.g. `flash-fwd.sm_90a.bf16.d128.128x128x3wg.wgmma`. */
export function hopperVariantKey(v: HopperVariant): string {
  const dtype = v.dtype === 'float16' ? 'f16' : 'bf16';
  const tiles = `${HOPPER_BLOCK_M}x${v.blockN}x3wg${v.overlap ? '' : '.serial'}`;
  return ['flash-fwd', v.arch, dtype, `d${v.headDim}`, tiles, 'wgmma'].join('.');
}

/** Dynamic shared memory: alignment slack, Q, STAGES K and V tiles, the mbarriers (hopper_smem_bytes). */
export function hopperSharedBytes(v: HopperVariant): number {
  return (
    1024 + HOPPER_BLOCK_M * v.headDim * 2 + 2 * v.stages * v.blockN * v.headDim * 2 + 8 * (1 + 4 * v.stages)
  );
}

/** The -D set of the kernel's extern "C" entry. */
export function hopperDefines(v: HopperVariant): Record<string, number> {
  return {
    HOPPER_D: v.headDim,
    HOPPER_BN: v.blockN,
    HOPPER_STAGES: v.stages,
    HOPPER_FP16: v.dtype === 'float16' ? 1 : 0,
    HOPPER_OVERLAP: v.overlap ? 1 : 0,
  };
}

export const HOPPER_KERNEL = { file: 'hopper/hopper_fwd.cu', name: 'attnlab_hopper_fwd' } as const;
