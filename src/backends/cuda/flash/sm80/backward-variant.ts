/**
 * The fused CUDA flash backward's variant (src/kernels/flash/flash_bwd.cu): what specialises the
 * module, its tiles with the reasons, the shared memory each main kernel asks for, and the support
 * rule that needs no GPU (backward.ts adds the device's checks).
 *
 * Register counts are ptxas's (nvcc 13.0, `-Xptxas -v`, sm_90a / sm_80), no spills anywhere:
 *   dK/dV loop (128 keys × 64 queries, 8 warps): D=128 255/253 registers with/without dQ (with
 *   the dO clean-up), D=96 ≤ 246, D=64 ≤ 203, D=32 less;  dQ pass (128 × 64, 8 warps): D=128
 *   240, D=64 172;  the wgmma dK/dV loop (hopper/hopper_bwd.cu, D=128, the one-barrier
 *   schedule): 250/254 bf16, 250/254 fp16.
 */
import { config } from '../../../../config.js';
import { InvalidArgumentError } from '../../../../errors.js';
import { SUPPORTED, type Support, unsupported } from '../../../backend.js';
import type { BackwardProblem } from '../../../backward-problem.js';
import { blockMaskOf, type FlashModifiers, hasVariants, modifiersOf, variantsRule } from '../modifiers.js';
import { FLASH_BIAS_CODES, type FlashBiasType } from './variant.js';

/** Row and key indices are int32 in the kernels, and i + diag ± window must not overflow. */
const MAX_LENGTH = 1 << 28;
/** The largest padded head dim whose dK and dV accumulators fit a warp's registers (see tiles). */
export const FLASH_BACKWARD_MAX_HEAD_DIM = 128;
/**
 * The largest padded head dim of the wgmma loop past 128 (hopper/bwd_dkdv_wide_sm90.cuh: each warpgroup
 * owns half of dK's and dV's columns, D/4 registers a lane each), on sm_90a with ATTNLAB_FLASH_BWD_WIDE=1.
 */
export const HOPPER_BACKWARD_WIDE_MAX_HEAD_DIM = 256;

export interface FlashBackwardTiles {
  /** Keys per block of the dK/dV loop: 16 per warp (one m-tile; dK+dV take D/2 registers per lane). */
  readonly keys: number;
  /** Query rows per step of that loop. */
  readonly queries: number;
  readonly warps: number;
}

/**
 * 128 keys × 64 queries over 8 warps for every head dim up to 128 (FlashAttention-2's Bc × Br for
 * its sm80 hdim-128 backward): each warp holds dK and dV of its 16 keys (D/2 float32 registers per
 * lane each, 128 at D=128) plus Sᵀ and dPᵀ of 16 × 64 (32 each); 64 queries also tile the dQ
 * product exactly once over the 8 warps (4 m-tiles × 2 halves of D). 32 rows per warp would need
 * 2·D accumulator registers for dK+dV alone.
 */
export const FLASH_BACKWARD_TILES: FlashBackwardTiles = { keys: 128, queries: 64, warps: 8 };
/** The deterministic dQ pass: the forward's shape, 128 query rows (16 per warp), 64-key tiles, 2 stages. */
export const FLASH_BACKWARD_DQ_TILES = { rows: 128, keys: 64, warps: 8 } as const;
/** lse2/D rows per (b, n) are padded to this, a multiple of every query block. */
export const FLASH_BACKWARD_ROW_PAD = 128;

export interface FlashBackwardVariant {
  /**
   * The dK/dV loop: 'mma' (mma.sync, flash/flash_bwd.cu, every GPU from sm_80) or 'wgmma' (the
   * Hopper loop, hopper/hopper_bwd.cu: sm_90a, padded head dim 64 or 128, its own fixed tiles).
   */
  readonly kernel: FlashBackwardKernel;
  readonly arch: string;
  readonly dtype: 'bfloat16' | 'float16';
  /**
   * max(H, Hv) padded to a multiple of 32 (≥ 32): the mma.sync dQ product gives each of 2 warps D/2
   * columns, a multiple of 16; the wgmma module's 64 or 128 (hopperBackwardHeadDim).
   */
  readonly headDim: number;
  readonly tiles: FlashBackwardTiles;
  readonly deterministic: boolean;
  /** The bias element type (P with the bias, dBias); absent or 'none' without one. */
  readonly bias?: FlashBiasType;
  /**
   * The wgmma loop stores dBias in the bias's dtype, once an element (FLASH_DBIAS_STORE,
   * hopper/bwd_dkdv_sm90.cuh dbias_store_tile), where no bias element is shared by two (b, n, t, s)
   * positions (biasContributors 1): no float32 accumulator to zero, add into and convert. The default
   * (H100: (B,N,T,S) bias 43.1 ms against 66.1 adding); ATTNLAB_FLASH_BWD_DBIAS=add keeps the accumulator.
   */
  readonly dbiasStore?: boolean;
  /**
   * The wgmma loop takes a score modifier's gradient from the modified score, out of P
   * (FLASH_BWD_GRAD_FROM_OUTPUT, hopper/bwd_dkdv_sm90.cuh ds_mods_from_p), where the generated source
   * gives it so (ATTNLAB_SCORE_MOD_GRAD_FROM_OUTPUT). The default (H100: softcap 30 14.88 ms against 16.07
   * from the score); ATTNLAB_FLASH_BWD_SCORE_GRAD=score recomputes the raw score.
   */
  readonly gradFromOutput?: boolean;
  /** A boolean mask (P with the mask). */
  readonly mask?: boolean;
  /**
   * The wgmma loop reads the mask as 16-byte rows of a warp's 16 keys (FLASH_MASK_ROWS,
   * hopper/bwd_dkdv_sm90.cuh load_mask_rows) rather than a byte an element: keys contiguous, the other
   * strides multiples of 16 (maskRowsFit) and, checked on the device, a 16-byte aligned address.
   */
  readonly maskRows?: boolean;
  /** The score/mask modifier set compiled in ('mma' or 'wgmma'; never 'wgmma-ws'). */
  readonly modifiers?: FlashModifiers | null;
  /** A block mask (ATTNLAB_BLOCK_MASK; 'mma' or 'wgmma'). */
  readonly blockMask?: boolean;
  /**
   * Deterministic on a wgmma loop without its ordered dQ adds: the loop without dQ and the dQ pass
   * (ATTNLAB_FLASH_BWD_DET=pass, for comparisons).
   */
  readonly dqPass?: boolean;
  /**
   * The loop past a head dim of 128 with both dQ passes in flight (FLASH_BWD_WIDE_PAIR,
   * hopper/bwd_dkdv_wide_sm90.cuh; ATTNLAB_FLASH_BWD_WIDE=pair): `.pair` in the key.
   */
  readonly widePair?: boolean;
  /**
   * With widePair, dV and dK over a warpgroup's own 32 queries issued before the block's exchange of Pᵀ and
   * dSᵀ (FLASH_BWD_WIDE_HALVES; ATTNLAB_FLASH_BWD_WIDE=halves): `.pair.halves` in the key.
   */
  readonly wideHalves?: boolean;
  /**
   * FLASH_BWD_LEAN on a wgmma loop without a bias, a mask, modifiers or a block mask (hopper/bwd_dkdv_sm90.cuh;
   * the default, ATTNLAB_FLASH_BWD_LEAN=0 turns it off). Those hooks keep the general code either way.
   */
  readonly lean?: boolean;
  /**
   * The producer-warpgroup loop with dQ split by keys (FLASH_BWD_PINGPONG, hopper/bwd_dkdv_sm90_ws.cuh):
   * 'turns' with the consumer warpgroups taking turns issuing Sᵀ and dPᵀ, 'keys' the split alone.
   * ATTNLAB_FLASH_BWD_PINGPONG=0|1|keys; unset, HOPPER_BACKWARD_PINGPONG_HEAD_DIMS; never deterministic.
   */
  readonly pingpong?: 'turns' | 'keys';
  /**
   * wgmma-ws's producer cleans only the steps whose statistics flag a non-finite row (FLASH_BWD_WS_FLAGGED,
   * on by default; ATTNLAB_FLASH_BWD_WS_FLAGGED=0 scans every step).
   */
  readonly wsFlagged?: boolean;
  /**
   * The dQ staging's bank-spreading chunk permutation on the wgmma loops up to a head dim of 128
   * (FLASH_BWD_DQ_SWIZZLE; on by default, ATTNLAB_FLASH_BWD_DQ_SWIZZLE=0 turns it off).
   */
  readonly dqSwizzle?: boolean;
  /**
   * The wgmma loops without hooks read their first row statistics before the waits for Sᵀ and dPᵀ
   * (FLASH_BWD_STATS_EARLY; on by default, ATTNLAB_FLASH_BWD_STATS_EARLY=0 turns it off; lean modules only).
   */
  readonly statsEarly?: boolean;
}

export function flashBackwardHeadDim(H: number, Hv: number): number {
  return Math.max(32, Math.ceil(Math.max(H, Hv) / 32) * 32);
}

/**
 * 'mma' (mma.sync, every GPU from sm_80), 'wgmma' (the Hopper loop, 256 threads, every thread loading)
 * or 'wgmma-ws' (the same loop on two consumer warpgroups beside a producer warpgroup that loads:
 * hopper/bwd_dkdv_sm90_ws.cuh).
 */
export type FlashBackwardKernel = 'mma' | 'wgmma' | 'wgmma-ws';

/**
 * The padded head dims the wgmma dK/dV loop is built for (hopper/bwd_dkdv_sm90.cuh: one or two 64-column
 * boxes of the head dim, each warpgroup computing dQ for half of it).
 */
export const HOPPER_BACKWARD_HEAD_DIMS: readonly number[] = [64, 128];
/**
 * Past 128 (ATTNLAB_FLASH_BWD_WIDE=1): the 64-key loop of hopper/bwd_dkdv_wide_sm90.cuh, whose
 * warpgroups split the head dim into a 64-column box and half of another at 192, two boxes at 256.
 */
export const HOPPER_BACKWARD_WIDE_HEAD_DIMS: readonly number[] = [192, 256];

/**
 * The wgmma module's head dim for a padded (multiple of 32) head dim D: 64 or 128, the columns past
 * max(H, Hv) zero-filled by the loads (D = 32 and 96 run a quarter or a third more products than
 * they need), or null past 128.
 */
export function hopperBackwardHeadDim(
  D: number,
  wide = config().experimental.flashBackwardWide,
): number | null {
  const dims = wide
    ? [...HOPPER_BACKWARD_HEAD_DIMS, ...HOPPER_BACKWARD_WIDE_HEAD_DIMS]
    : HOPPER_BACKWARD_HEAD_DIMS;
  return dims.find((d) => D <= d) ?? null;
}
/**
 * The loop each padded head dim runs on sm_90a when ATTNLAB_FLASH_BWD_KERNEL is unset, the fastest of
 * one timing run on an H100 80GB HBM3 (2026-12-06, scripts/gpu-backward-wgmma.sh loops: the loops alternating
 * in one process beside attnlab's cudnn, B=4 T=S=8192 N=16 bf16, TFLOP/s non-causal / causal;
 * benchmarks/results/h100-sxm/backward/2026-12-06-424ae21-loops-h{128,64}.txt):
 *   D=64   wgmma-ws with the flagged clean, dQ swizzle, early statistics and ping-pong 397.4 / 353.2
 *          (every-step clean, no swizzle 304.0 / 293.2), wgmma 290.8 / 285.7; cudnn 454.2 / 413.8
 *   D=128  wgmma-ws with the flagged clean, dQ swizzle and early statistics 504.6 / 475.4 (every-step clean
 *          361.7 / 353.1), wgmma with swizzle and early statistics 437.3 / 430.1, ping-pong 435.1 / 383.3;
 *          cudnn 482.8 / 492.8
 * D=96 runs the D=128 module (a quarter of its columns zeros), so it follows D=128. The hooks (a bias, a
 * boolean mask, modifiers, block masks) are only in the every-thread-loads loop: `general` below; it runs
 * without the switches (the swizzle not yet GPU-run with hooks). D=32
 * stays on mma.sync: not measured.
 */
export const HOPPER_BACKWARD_DEFAULTS: Readonly<Record<number, FlashBackwardKernel>> = {
  64: 'wgmma-ws',
  96: 'wgmma-ws',
  128: 'wgmma-ws',
};
/**
 * The wgmma module head dims whose wgmma-ws loop splits dQ by keys with the consumer warpgroups taking turns
 * (FLASH_BWD_PINGPONG) when ATTNLAB_FLASH_BWD_PINGPONG is unset: D=64 at 397.4 / 353.2 TFLOP/s against
 * 372.0 / 338.8 without; at D=128 it lost (435.1 / 383.3 against 504.6 / 475.4), same run as above.
 */
export const HOPPER_BACKWARD_PINGPONG_HEAD_DIMS: readonly number[] = [64];
/** The padded head dims that run a wgmma loop by default. */
export const HOPPER_BACKWARD_DEFAULT_HEAD_DIMS: readonly number[] =
  Object.keys(HOPPER_BACKWARD_DEFAULTS).map(Number);
/** The wgmma loop's tiles (hopper/bwd_dkdv_sm90.cuh): 128 keys over two warpgroups, 64 queries per step. */
export const HOPPER_BACKWARD_TILES: FlashBackwardTiles = { keys: 128, queries: 64, warps: 8 };
/**
 * Past a head dim of 128 (hopper/bwd_dkdv_wide_sm90.cuh): 64 keys a block, both warpgroups over all of
 * them, 64 queries a step. dK and dV of 64 keys × D/2 columns a warpgroup are D/4 float32 registers a
 * lane each; ptxas (nvcc 13.0, sm_90a): 216 registers at D=256, 196 at D=192, no spills. Shared memory:
 * K and V of 128 keys would be 128 KiB at D=256 before any Q/dO stage.
 */
export const HOPPER_BACKWARD_WIDE_TILES: FlashBackwardTiles = { keys: 64, queries: 64, warps: 8 };
/** The same with the producer warpgroup (hopper/bwd_dkdv_sm90_ws.cuh): 12 warps. */
export const HOPPER_BACKWARD_WS_TILES: FlashBackwardTiles = { keys: 128, queries: 64, warps: 12 };

/**
 * Which dK/dV loop runs for padded head dim `headDim`: on sm_90a up to 128 (hopperBackwardHeadDim) the
 * wgmma loop ATTNLAB_FLASH_BWD_KERNEL names, or HOPPER_BACKWARD_DEFAULTS' when it is unset, unless
 * ATTNLAB_FLASH_BWD_KERNEL=mma or ATTNLAB_FLASH_BWD_TILES (mma.sync tiles) says otherwise; mma.sync
 * everywhere else.
 *
 * `general`: the problem has a bias, a boolean mask, modifiers or a block mask. Those hooks are in the
 * every-thread-loads wgmma loop (hopper/bwd_dkdv_sm90.cuh) and the mma.sync loop, not in the
 * producer-warpgroup loop, so a general problem takes 'wgmma' wherever a plain one would take
 * 'wgmma-ws' (D=64, or ATTNLAB_FLASH_BWD_KERNEL=wgmma-ws): at D=64 wgmma runs 232 TFLOP/s against
 * mma.sync's 160 (H100, plain).
 */
export function chooseFlashBackwardKernel(
  headDim: number,
  arch: string,
  choice = config().experimental.flashBackwardKernel,
  tiles = config().experimental.flashBackwardTiles,
  general = false,
): FlashBackwardKernel {
  if (arch !== 'sm_90a' || hopperBackwardHeadDim(headDim) === null || tiles || choice === 'mma') return 'mma';
  // Past 128 one loop, without the producer warpgroup (flashBackwardRule refuses what it cannot take).
  if (headDim > FLASH_BACKWARD_MAX_HEAD_DIM) return 'wgmma';
  const named = choice === 'wgmma-ws' || choice === 'wgmma' ? choice : HOPPER_BACKWARD_DEFAULTS[headDim];
  if (named === undefined) return 'mma';
  return general && named === 'wgmma-ws' ? 'wgmma' : named;
}

/**
 * Whether the generated source gives the score modifier's gradient from the modified score
 * (src/variants/cuda.ts: ATTNLAB_SCORE_MOD_GRAD_FROM_OUTPUT 1, e.g. softcap); elsewhere (ALiBi) the
 * variant keeps its key without `.grad-out`.
 */
export function gradFromOutputGenerated(cudaSource: string): boolean {
  return /#define ATTNLAB_SCORE_MOD_GRAD_FROM_OUTPUT 1\b/.test(cudaSource);
}

export function flashBackwardVariant(p: BackwardProblem, arch: string): FlashBackwardVariant {
  const padded = flashBackwardHeadDim(p.H, p.Hv);
  // A bias, a boolean mask, modifiers and block masks run on the wgmma loop without the producer
  // warpgroup on sm_90a, on mma.sync elsewhere (chooseFlashBackwardKernel). Deterministic with a block
  // mask, the wgmma loop runs without dQ and the dQ pass follows (orderedDqAdds).
  const general = p.bias !== null || p.mask !== null || hasVariants(p);
  const wide = padded > FLASH_BACKWARD_MAX_HEAD_DIM;
  const kernel = chooseFlashBackwardKernel(
    padded,
    arch,
    config().experimental.flashBackwardKernel,
    config().experimental.flashBackwardTiles,
    general,
  );
  return {
    kernel,
    arch,
    dtype: p.dtype as FlashBackwardVariant['dtype'],
    headDim: kernel === 'mma' ? padded : (hopperBackwardHeadDim(padded) ?? padded),
    tiles:
      kernel === 'wgmma'
        ? wide
          ? HOPPER_BACKWARD_WIDE_TILES
          : HOPPER_BACKWARD_TILES
        : kernel === 'wgmma-ws'
          ? HOPPER_BACKWARD_WS_TILES
          : chooseFlashBackwardTiles(padded),
    deterministic: p.deterministic,
    bias: p.bias ? (p.bias.tensor.dtype as FlashBiasType) : 'none',
    dbiasStore:
      kernel === 'wgmma' &&
      p.bias !== null &&
      biasContributors(p) === 1 &&
      config().experimental.flashBackwardDbias !== 'add',
    gradFromOutput:
      kernel === 'wgmma' &&
      modifiersOf(p)?.hasScoreMod === true &&
      gradFromOutputGenerated(modifiersOf(p)?.cudaSource ?? '') &&
      config().experimental.flashBackwardScoreGrad !== 'score',
    mask: p.mask !== null,
    maskRows: kernel === 'wgmma' && maskRowsFit(p.mask?.strides ?? null),
    modifiers: modifiersOf(p),
    blockMask: blockMaskOf(p) !== null,
    dqPass:
      p.deterministic && kernel !== 'mma' && config().experimental.flashBackwardDeterministic === 'pass',
    // The hooks keep the general code (NO_HOOKS in hopper/bwd_dkdv_sm90.cuh): no `.lean` in their names.
    // The loop past 128 has no `.lean` form.
    lean: kernel !== 'mma' && !general && !wide && config().experimental.flashBackwardLean,
    ...(kernel === 'wgmma' && wide && config().experimental.flashBackwardWidePair ? { widePair: true } : {}),
    ...(kernel === 'wgmma' && wide && config().experimental.flashBackwardWideHalves
      ? { wideHalves: true }
      : {}),
    ...pingpongOf(kernel, hopperBackwardHeadDim(padded) ?? padded, p.deterministic, general),
    ...(kernel === 'wgmma-ws' && config().experimental.flashBackwardWsFlagged ? { wsFlagged: true } : {}),
    // The hooks' loop keeps the plain dQ staging: the GPU suite has run the swizzle on plain problems only.
    ...(kernel !== 'mma' && !general && !wide && config().experimental.flashBackwardDqSwizzle
      ? { dqSwizzle: true }
      : {}),
    ...(kernel !== 'mma' &&
    !general &&
    !wide &&
    config().experimental.flashBackwardLean &&
    config().experimental.flashBackwardStatsEarly
      ? { statsEarly: true }
      : {}),
  };
}

/**
 * Plain problems only: the hooks (bias, masks, modifiers, block masks) keep the shared layout, whose block-mask
 * bitmaps leave the dQ-by-keys layout's 16 KiB no room at D=128 (hopper/bwd_dkdv_sm90_ws.cuh). Unset,
 * ATTNLAB_FLASH_BWD_PINGPONG follows HOPPER_BACKWARD_PINGPONG_HEAD_DIMS; `0` turns it off everywhere.
 */
function pingpongOf(
  kernel: FlashBackwardKernel,
  moduleHeadDim: number,
  deterministic: boolean,
  general: boolean,
): Pick<FlashBackwardVariant, 'pingpong'> {
  const setting = config().experimental.flashBackwardPingPong;
  const choice = setting ?? (HOPPER_BACKWARD_PINGPONG_HEAD_DIMS.includes(moduleHeadDim) ? '1' : '0');
  if (kernel !== 'wgmma-ws' || deterministic || general || choice === '0') return {};
  return { pingpong: choice === '1' ? 'turns' : 'keys' };
}

/**
 * Whether a boolean mask's (b, n, t, s) element strides let the wgmma loop read 16 keys of a row as one
 * 16-byte load: s contiguous and every other stride (0 when broadcast) a multiple of 16 bytes, e.g. a
 * contiguous (B,1,T,S) mask with S a multiple of 16. The address must be 16-byte aligned too (the
 * launcher checks the pointer).
 */
export function maskRowsFit(strides: readonly number[] | null): boolean {
  if (!strides) return false;
  return strides[3] === 1 && strides.slice(0, 3).every((s) => s % 16 === 0);
}

/**
 * The dK/dV loop's tiles for padded head dim D: FLASH_BACKWARD_TILES, or `ATTNLAB_FLASH_BWD_TILES=
 * KEYSxQUERIESxWARPS` so that a benchmark can compare others without a rebuild (each compiles without
 * spills at D ≤ 128 on sm_90a: 128x128x8 at D=64 takes 247 registers, 128x32x8 at D=128 241, 64x64x4
 * 255). On the H200 at D=128 (one process) 128x32x8 and 64x64x4 ran 7% and 8% slower than
 * 128x64x8. The kernel's shape rules: 16 keys per warp, queries a multiple of 16 whose 16-row tiles
 * divide the warps, and D split over the rest in 16-column steps.
 */
export function chooseFlashBackwardTiles(
  D: number,
  override = config().experimental.flashBackwardTiles,
): FlashBackwardTiles {
  if (!override) return FLASH_BACKWARD_TILES;
  const match = /^(\d+)x(\d+)x(\d+)$/.exec(override.trim());
  const [keys, queries, warps] = match ? [Number(match[1]), Number(match[2]), Number(match[3])] : [0, 0, 0];
  const split = warps / (queries / 16);
  const ok =
    warps >= 1 &&
    warps <= 16 &&
    keys === 16 * warps &&
    queries >= 16 &&
    queries % 16 === 0 &&
    Number.isInteger(split) &&
    split >= 1 &&
    (D / split) % 16 === 0;
  if (!ok) {
    throw new InvalidArgumentError(
      'ATTNLAB_FLASH_BWD_TILES',
      `KEYSxQUERIESxWARPS with KEYS = 16·WARPS, QUERIES a multiple of 16 whose QUERIES/16 divides WARPS, ` +
        `and D=${D} split into WARPS/(QUERIES/16) parts of a multiple of 16 columns, e.g. 128x64x8`,
      JSON.stringify(override),
    );
  }
  return { keys, queries, warps };
}

/**
 * e.g. `flash-bwd.sm_90a.bf16.d128.128x64x8`, `….lean.wgmma` for the Hopper loop (`….wgmma` with
 * ATTNLAB_FLASH_BWD_LEAN=0 or a bias, mask, modifiers or block mask), `….det` for the deterministic dQ pass.
 */
export function flashBackwardVariantKey(v: FlashBackwardVariant): string {
  const dtype = v.dtype === 'float16' ? 'f16' : 'bf16';
  const { keys, queries, warps } = v.tiles;
  const parts = ['flash-bwd', v.arch, dtype, `d${v.headDim}`, `${keys}x${queries}x${warps}`];
  if (v.lean && v.kernel !== 'mma') parts.push('lean');
  if (v.kernel === 'wgmma') parts.push('wgmma');
  if (v.kernel === 'wgmma' && v.widePair) parts.push('pair');
  if (v.kernel === 'wgmma' && v.widePair && v.wideHalves) parts.push('halves');
  if (v.kernel === 'wgmma-ws') parts.push('wgmma', 'ws');
  if (v.kernel === 'wgmma-ws' && v.pingpong) parts.push(v.pingpong === 'turns' ? 'pp' : 'dqkeys');
  if (v.kernel === 'wgmma-ws' && v.wsFlagged) parts.push('flagged');
  if (v.kernel !== 'mma' && v.statsEarly) parts.push('early');
  if (v.kernel !== 'mma' && v.dqSwizzle) parts.push('dqswz');
  if (v.deterministic) parts.push('det');
  if (v.deterministic && v.dqPass && v.kernel !== 'mma') parts.push('pass');
  if (v.bias && v.bias !== 'none')
    parts.push(`bias-${{ float32: 'f32', bfloat16: 'bf16', float16: 'f16' }[v.bias]}`);
  if (v.bias && v.bias !== 'none' && v.dbiasStore) parts.push('dbias-store');
  if (v.mask) parts.push(v.maskRows ? 'mask-rows' : 'mask');
  if (v.modifiers) parts.push(`mods-${v.modifiers.key}`);
  if (v.modifiers && v.gradFromOutput) parts.push('grad-out');
  if (v.blockMask) parts.push('bmask');
  return parts.join('.');
}

/** The module's source file, relative to src/kernels. */
export function flashBackwardFile(v: FlashBackwardVariant): string {
  return v.kernel === 'mma' ? 'flash/flash_bwd.cu' : 'hopper/hopper_bwd.cu';
}

/**
 * Whether deterministic mode keeps dQ in the dK/dV loop, its adds in a fixed order of key blocks (the
 * wgmma loops, hopper/bwd_dq_order.cuh), rather than the loop without dQ and the dQ pass (mma.sync,
 * a block mask, whose walk skips steps and so breaks the order's contiguous key blocks, and
 * ATTNLAB_FLASH_BWD_DET=pass).
 */
export function orderedDqAdds(
  v: Pick<FlashBackwardVariant, 'kernel' | 'deterministic' | 'blockMask' | 'dqPass'>,
): boolean {
  return v.deterministic && v.kernel !== 'mma' && !v.blockMask && !v.dqPass;
}

export function flashBackwardDefines(v: FlashBackwardVariant): Record<string, number> {
  // Only where set, so that the plain modules keep their cache keys.
  const general = {
    ...(v.bias && v.bias !== 'none' ? { FLASH_BIAS: FLASH_BIAS_CODES[v.bias] } : {}),
    ...(v.bias && v.bias !== 'none' && v.dbiasStore && v.kernel === 'wgmma' ? { FLASH_DBIAS_STORE: 1 } : {}),
    ...(v.mask ? { FLASH_MASK: 1 } : {}),
    ...(v.mask && v.maskRows ? { FLASH_MASK_ROWS: 1 } : {}),
    ...(v.blockMask ? { ATTNLAB_BLOCK_MASK: 1 } : {}),
  };
  const fp16 = v.dtype === 'float16' ? 1 : 0;
  // The ordered dQ adds of deterministic mode (hopper/bwd_dq_order.cuh).
  const ordered: Record<string, number> = orderedDqAdds(v) ? { FLASH_BWD_DETERMINISTIC: 1 } : {};
  // With modifiers the wgmma loop's `tanh` is tanh.approx.f32, as in the Hopper forward whose log-sum-exp
  // it reads (docs/internals/variants.md): the same P, and one MUFU operation a score where libm's tanhf
  // takes two and ~20 instructions.
  const fastTanh: Record<string, number> = v.modifiers
    ? { ATTNLAB_FAST_TANH: 1, ...(v.gradFromOutput ? { FLASH_BWD_GRAD_FROM_OUTPUT: 1 } : {}) }
    : {};
  const lean: Record<string, number> = v.lean ? { FLASH_BWD_LEAN: 1 } : {};
  const pair: Record<string, number> =
    v.kernel === 'wgmma' && v.widePair
      ? { FLASH_BWD_WIDE_PAIR: 1, ...(v.wideHalves ? { FLASH_BWD_WIDE_HALVES: 1 } : {}) }
      : {};
  const swizzle: Record<string, number> = v.dqSwizzle ? { FLASH_BWD_DQ_SWIZZLE: 1 } : {};
  const early: Record<string, number> = v.statsEarly ? { FLASH_BWD_STATS_EARLY: 1 } : {};
  if (v.kernel === 'wgmma')
    return {
      FLASH_D: v.headDim,
      FLASH_FP16: fp16,
      ...general,
      ...fastTanh,
      ...ordered,
      ...lean,
      ...swizzle,
      ...early,
      ...pair,
    };
  if (v.kernel === 'wgmma-ws')
    return {
      FLASH_D: v.headDim,
      FLASH_FP16: fp16,
      FLASH_BWD_WS: 1,
      ...ordered,
      ...lean,
      ...(v.pingpong ? { FLASH_BWD_PINGPONG: v.pingpong === 'turns' ? 1 : 2 } : {}),
      ...(v.wsFlagged ? { FLASH_BWD_WS_FLAGGED: 1 } : {}),
      ...swizzle,
      ...early,
    };
  return {
    FLASH_D: v.headDim,
    FLASH_FP16: fp16,
    FLASH_BWD_KEYS: v.tiles.keys,
    FLASH_BWD_QUERIES: v.tiles.queries,
    FLASH_NW: v.tiles.warps,
    ...general,
  };
}

/** Dynamic shared memory per block of each main kernel, as bwd_dkdv.cuh / bwd_dq.cuh lay it out. */
export function flashBackwardSharedBytes(v: FlashBackwardVariant): {
  dkdv: number;
  dkdvOnly: number;
  dq: number;
} {
  const pitch = (v.headDim + 8) * 2; // bytes per padded 16-bit row
  const { keys, queries } = v.tiles;
  const dq = FLASH_BACKWARD_DQ_TILES;
  // Q | dO | two stages of (K | V), the deterministic dQ pass of either module.
  const dqBytes = 2 * dq.rows * pitch + 2 * 2 * dq.keys * pitch;
  if (v.kernel !== 'mma' && v.headDim > FLASH_BACKWARD_MAX_HEAD_DIM) {
    // hopper/bwd_dkdv_wide_sm90.cuh: 1 KiB of slack | K | V | two stages of (Q | dO) | Pᵀ | dSᵀ (64 × 64
    // each) | at D=192 the float32 dQ staging, 16 KiB a warpgroup (at D=256 each warpgroup stages into
    // its half of the stage's dO) | two stages of (lse2 | D): 194 KiB at D=192, 210 KiB at D=256. With both
    // dQ passes in flight (widePair) the second has its own: 8 KiB more a warpgroup at D=192 (210 KiB), the
    // warpgroup's half of the stage's Q at D=256. No dQ pass at these head dims (flashBackwardRule).
    const row = v.headDim * 2;
    const staging = v.headDim === 256 ? 0 : 2 * queries * (64 + (v.widePair ? 32 : 0)) * 4;
    const bytes =
      1024 + 2 * keys * row + 2 * 2 * queries * row + 2 * keys * queries * 2 + staging + 2 * 2 * queries * 4;
    return { dkdv: bytes, dkdvOnly: bytes, dq: 0 };
  }
  if (v.kernel !== 'mma') {
    // 1 KiB of alignment slack | K | V (128-byte rows, no padding) | three stages of (Q | dO) | when
    // dQ is accumulated here, two dS buffers (queries × keys) and the float32 dQ staging (queries ×
    // head dim, the bulk reduces' source) | three stages of (lse2 | D): the one-barrier-per-step
    // schedule of hopper/bwd_dkdv_sm90.cuh. At D=128 that is 231,936 of the 232,448 bytes allowed.
    const row = v.headDim * 2;
    const stats = 3 * 2 * queries * 4;
    const only = 1024 + 2 * keys * row + 3 * 2 * queries * row;
    // With dQ split by keys (pingpong) each warpgroup stages a 64-column pass: 2 × 64 × 64 floats.
    const staging = v.kernel === 'wgmma-ws' && v.pingpong ? 2 * queries * 64 * 4 : queries * v.headDim * 4;
    const dqParts = 2 * queries * keys * 2 + staging;
    // wgmma-ws: then the full and empty mbarriers of the three stages, K/V's, three 32-bit flags.
    // wgmma with a block mask: a bit a step (4096 steps in 512 bytes, the rest at D=128: 232,448 bytes in all).
    const sync = v.kernel === 'wgmma-ws' ? 16 * 3 + 8 + 4 * 3 : v.blockMask ? 512 : 0;
    return { dkdv: only + dqParts + stats + sync, dkdvOnly: only + stats + sync, dq: dqBytes };
  }
  // K | V | two stages of (Q | dO | lse2 | D) | dSᵀ (queries × (keys + 8)) when dQ is accumulated here.
  const kvOnly = 2 * keys * pitch + 2 * (2 * queries * pitch + 2 * queries * 4);
  return { dkdv: kvOnly + queries * (keys + 8) * 2, dkdvOnly: kvOnly, dq: dqBytes };
}

/** How many (b, n, t, s) positions add into each dBias element: the product of the broadcast sizes. */
export function biasContributors(p: Pick<BackwardProblem, 'B' | 'N' | 'T' | 'S' | 'bias'>): number {
  if (!p.bias) return 0;
  const sizes = [p.B, p.N, p.T, p.S];
  return p.bias.strides.reduce((n, stride, d) => (stride === 0 ? n * sizes[d] : n), 1);
}

/**
 * Bytes of the float32 dQ workspace (none where deterministic mode runs the dQ pass): (B,T,N,H)
 * row-major for the mma.sync module's reductions; (B·N, 2, t_pad, D/2) for the wgmma module's bulk reduce-adds
 * (hopper/bwd_dq_accum.cuh), whose 64-row query blocks may run past T into the padding, and when
 * deterministic one int32 semaphore per (b·N + n, 64-row query block) after it (hopper/bwd_dq_order.cuh).
 */
export function flashBackwardDqWorkspaceBytes(
  v: FlashBackwardVariant,
  p: Pick<BackwardProblem, 'B' | 'T' | 'N' | 'H'>,
  tPad: number,
): number {
  if (v.deterministic && !orderedDqAdds(v)) return 0;
  if (v.kernel !== 'mma') {
    const semaphores = v.deterministic ? p.B * p.N * (tPad / v.tiles.queries) * 4 : 0;
    return p.B * p.N * tPad * v.headDim * 4 + semaphores;
  }
  return p.B * p.T * p.N * p.H * 4;
}

/**
 * What the loop past a head dim of 128 (hopper/bwd_dkdv_wide_sm90.cuh) cannot take, or null: it has no
 * bias, boolean mask, modifier or block-mask hooks, no mma.sync form or tiles, and no dQ pass (the
 * mma.sync dQ pass holds 128 query rows × D in registers).
 */
function wideBackwardRule(p: BackwardProblem): string | null {
  const dims = `H=${p.H}, Hv=${p.Hv}`;
  if (p.bias !== null || p.mask !== null || hasVariants(p)) {
    return (
      `${dims} with a bias, a boolean mask, score/mask modifiers or a block mask: the loop past a head dim ` +
      'of 128 takes none of them'
    );
  }
  const x = config().experimental;
  if (x.flashBackwardKernel === 'mma' || x.flashBackwardTiles) {
    return `${dims} with ATTNLAB_FLASH_BWD_KERNEL=mma or ATTNLAB_FLASH_BWD_TILES: the mma.sync loop takes at most ${FLASH_BACKWARD_MAX_HEAD_DIM}`;
  }
  if (p.deterministic && x.flashBackwardDeterministic === 'pass') {
    return `${dims} deterministic with ATTNLAB_FLASH_BWD_DET=pass: the dQ pass takes at most ${FLASH_BACKWARD_MAX_HEAD_DIM}`;
  }
  return null;
}

/** What the kernels cannot take, decided from the problem alone (no GPU needed); SUPPORTED otherwise. */
export function flashBackwardRule(p: BackwardProblem): Support {
  if (p.dtype !== 'bfloat16' && p.dtype !== 'float16') {
    return unsupported(`dtype ${p.dtype}: the fused backward runs on tensor cores, bfloat16 or float16 only`);
  }
  if (p.bias && !(p.bias.tensor.dtype in FLASH_BIAS_CODES)) {
    return unsupported(
      `bias dtype ${p.bias.tensor.dtype}: the kernels read float32, bfloat16 or float16 bias`,
    );
  }
  if (p.bias && p.deterministic && biasContributors(p) > 1) {
    return unsupported(
      `deterministic with a bias broadcast over ${biasContributors(p)} (batch, head, query, key) positions ` +
        'per element: dBias sums them by float32 reductions, whose order varies (naive is deterministic)',
    );
  }
  if (hasVariants(p)) {
    if (p.paged || p.packed) {
      return unsupported(
        'score/mask modifiers and block masks with a paged or packed layout: dense inputs only',
      );
    }
    const rule = variantsRule(p);
    if (rule) return unsupported(rule);
    const grads = modifiersOf(p)?.captures.filter((c) => c.needsGrad) ?? [];
    if (p.deterministic && grads.length > 0) {
      return unsupported(
        `deterministic with captured tensors that need their gradient (${grads.map((c) => c.name).join(', ')}): ` +
          'they are summed by float32 atomics, whose order varies',
      );
    }
  }
  const wide = config().experimental.flashBackwardWide;
  const most = wide ? HOPPER_BACKWARD_WIDE_MAX_HEAD_DIM : FLASH_BACKWARD_MAX_HEAD_DIM;
  if (p.H % 8 !== 0 || p.Hv % 8 !== 0 || Math.max(p.H, p.Hv) > most) {
    return unsupported(
      `head dims H=${p.H}, Hv=${p.Hv}: the fused backward needs multiples of 8 of at most ${most} ` +
        `(dK and dV of 16 keys per warp must fit in registers${wide ? '' : '; ATTNLAB_FLASH_BWD_WIDE=1 takes up to 256 on sm_90a'})`,
    );
  }
  if (Math.max(p.H, p.Hv) > FLASH_BACKWARD_MAX_HEAD_DIM) {
    const why = wideBackwardRule(p);
    if (why) return unsupported(why);
  }
  if (p.logSumExp.dtype !== 'float32') {
    return unsupported(`logSumExp ${p.logSumExp.dtype}: the kernels read a float32 log-sum-exp`);
  }
  if (p.T >= MAX_LENGTH || p.S >= MAX_LENGTH) {
    return unsupported(`T=${p.T}, S=${p.S}: the kernels index rows with int32 and need T, S < 2^28`);
  }
  if (p.B * p.N > 65535) {
    return unsupported(
      `B·N = ${p.B * p.N}: the grid's y dimension (one per batch and head) is at most 65535`,
    );
  }
  return SUPPORTED;
}
