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
  /** max(H, Hv) padded to a multiple of 32 (≥ 32): the dQ product gives each of 2 warps D/2 columns, a multiple of 16. */
  readonly headDim: number;
  readonly tiles: FlashBackwardTiles;
  readonly deterministic: boolean;
  /** The bias element type (P with the bias, dBias); absent or 'none' without one. */
  readonly bias?: FlashBiasType;
  /** A boolean mask (P with the mask). */
  readonly mask?: boolean;
  /** The score/mask modifier set compiled in (mma only). */
  readonly modifiers?: FlashModifiers | null;
  /** A block mask (ATTNLAB_BLOCK_MASK, mma only). */
  readonly blockMask?: boolean;
}

export function flashBackwardHeadDim(H: number, Hv: number): number {
  return Math.max(32, Math.ceil(Math.max(H, Hv) / 32) * 32);
}

export type FlashBackwardKernel = 'mma' | 'wgmma';

/**
 * The padded head dims the wgmma dK/dV loop is built for (hopper/bwd_dkdv_sm90.cuh: one or two 64-column
 * boxes of the head dim; at D = 64 warpgroup 0 computes dQ's one box).
 */
export const HOPPER_BACKWARD_HEAD_DIMS: readonly number[] = [64, 128];
/**
 * Those it runs on sm_90a when ATTNLAB_FLASH_BWD_KERNEL is unset: the shared gradient suite passes
 * with the wgmma loop on at D = 64 and 128 (backward.test flash, long/deterministic/random,
 * flash-backward.test; memcheck, racecheck and synccheck 0;
 * benchmarks/results/h200/backward/2026-12-01-flash-wgmma-default,
 * benchmarks/results/h200/backward/2026-12-01-flash-wgmma-one-barrier). At B=4 T=S=8192 N=16 H=128
 * bf16, one bench run, the loop (one-barrier schedule, flag-gated Q/dO clean-up, stmatrix dS stores)
 * takes 17.42 / 8.91 ms (causal) against PyTorch FlashAttention-2's 17.75 / 9.08 ms (1.02× / 1.02×);
 * the mma.sync loop takes 29.7 / 15.1 ms. At H=64 it takes 12.24 / 6.34 ms against the mma.sync
 * loop's 17.8 / 8.98 (1.44× / 1.41×) and PyTorch FA2's 9.57 / 5.20 ms (0.78× / 0.82×, same bench run).
 */
export const HOPPER_BACKWARD_DEFAULT_HEAD_DIMS: readonly number[] = [64, 128];
/** The wgmma loop's tiles (hopper/bwd_dkdv_sm90.cuh): 128 keys over two warpgroups, 64 queries per step. */
export const HOPPER_BACKWARD_TILES: FlashBackwardTiles = { keys: 128, queries: 64, warps: 8 };

/**
 * Which dK/dV loop runs: wgmma on sm_90a for a padded head dim of HOPPER_BACKWARD_HEAD_DIMS when
 * ATTNLAB_FLASH_BWD_KERNEL=wgmma, and of HOPPER_BACKWARD_DEFAULT_HEAD_DIMS when it is unset, unless
 * ATTNLAB_FLASH_BWD_KERNEL=mma or ATTNLAB_FLASH_BWD_TILES (mma.sync tiles) says otherwise; mma.sync
 * everywhere else.
 */
export function chooseFlashBackwardKernel(
  headDim: number,
  arch: string,
  choice = config().experimental.flashBackwardKernel,
  tiles = config().experimental.flashBackwardTiles,
): FlashBackwardKernel {
  if (arch !== 'sm_90a' || !HOPPER_BACKWARD_HEAD_DIMS.includes(headDim) || tiles || choice === 'mma')
    return 'mma';
  return choice === 'wgmma' || HOPPER_BACKWARD_DEFAULT_HEAD_DIMS.includes(headDim) ? 'wgmma' : 'mma';
}

export function flashBackwardVariant(p: BackwardProblem, arch: string): FlashBackwardVariant {
  const headDim = flashBackwardHeadDim(p.H, p.Hv);
  // A bias, a boolean mask, modifiers and block masks run on the mma.sync loop (bwd_dkdv.cuh).
  const general = p.bias !== null || p.mask !== null || hasVariants(p);
  const kernel = general ? 'mma' : chooseFlashBackwardKernel(headDim, arch);
  return {
    kernel,
    arch,
    dtype: p.dtype as FlashBackwardVariant['dtype'],
    headDim,
    tiles: kernel === 'wgmma' ? HOPPER_BACKWARD_TILES : chooseFlashBackwardTiles(headDim),
    deterministic: p.deterministic,
    bias: p.bias ? (p.bias.tensor.dtype as FlashBiasType) : 'none',
    mask: p.mask !== null,
    modifiers: modifiersOf(p),
    blockMask: blockMaskOf(p) !== null,
  };
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
 * e.g. `flash-bwd.sm_90a.bf16.d128.128x64x8`, `….wgmma` for the Hopper loop, `….det` for the
 * deterministic dQ pass.
 */
export function flashBackwardVariantKey(v: FlashBackwardVariant): string {
  const dtype = v.dtype === 'float16' ? 'f16' : 'bf16';
  const { keys, queries, warps } = v.tiles;
  const parts = ['flash-bwd', v.arch, dtype, `d${v.headDim}`, `${keys}x${queries}x${warps}`];
  if (v.kernel === 'wgmma') parts.push('wgmma');
  if (v.deterministic) parts.push('det');
  if (v.bias && v.bias !== 'none')
    parts.push(`bias-${{ float32: 'f32', bfloat16: 'bf16', float16: 'f16' }[v.bias]}`);
  if (v.mask) parts.push('mask');
  if (v.modifiers) parts.push(`mods-${v.modifiers.key}`);
  if (v.blockMask) parts.push('bmask');
  return parts.join('.');
}

/** The module's source file, relative to src/kernels. */
export function flashBackwardFile(v: FlashBackwardVariant): string {
  return v.kernel === 'wgmma' ? 'hopper/hopper_bwd.cu' : 'flash/flash_bwd.cu';
}

export function flashBackwardDefines(v: FlashBackwardVariant): Record<string, number> {
  if (v.kernel === 'wgmma') return { FLASH_D: v.headDim, FLASH_FP16: v.dtype === 'float16' ? 1 : 0 };
  return {
    FLASH_D: v.headDim,
    FLASH_FP16: v.dtype === 'float16' ? 1 : 0,
    FLASH_BWD_KEYS: v.tiles.keys,
    FLASH_BWD_QUERIES: v.tiles.queries,
    FLASH_NW: v.tiles.warps,
    // Only where set, so that the plain modules keep their cache keys.
    ...(v.bias && v.bias !== 'none' ? { FLASH_BIAS: FLASH_BIAS_CODES[v.bias] } : {}),
    ...(v.mask ? { FLASH_MASK: 1 } : {}),
    ...(v.blockMask ? { ATTNLAB_BLOCK_MASK: 1 } : {}),
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
  if (v.kernel === 'wgmma') {
    // 1 KiB of alignment slack | K | V (128-byte rows, no padding) | three stages of (Q | dO | lse2, D),
    // each rounded up to the 1 KiB swizzle atom | two dS buffers (queries × keys) when dQ is
    // accumulated here: the one-barrier-per-step schedule of hopper/bwd_dkdv_sm90.cuh.
    const row = v.headDim * 2;
    const stage = Math.ceil((2 * queries * row + 2 * queries * 4) / 1024) * 1024;
    const only = 1024 + 2 * keys * row + 3 * stage;
    return { dkdv: only + 2 * queries * keys * 2, dkdvOnly: only, dq: dqBytes };
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
  if (p.H % 8 !== 0 || p.Hv % 8 !== 0 || Math.max(p.H, p.Hv) > FLASH_BACKWARD_MAX_HEAD_DIM) {
    return unsupported(
      `head dims H=${p.H}, Hv=${p.Hv}: the fused backward needs multiples of 8 of at most ` +
        `${FLASH_BACKWARD_MAX_HEAD_DIM} (dK and dV of 16 keys per warp must fit in registers)`,
    );
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
