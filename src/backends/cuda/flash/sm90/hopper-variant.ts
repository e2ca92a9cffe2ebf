/**
 * Which flash problems run on the Hopper kernel (src/kernels/hopper/hopper_fwd.cu: TMA, wgmma,
 * warp specialisation) and with which specialisation: the variant table, the one source of the
 * kernel's configuration (hopperConfigFields: the named fields of src/kernels/hopper/fwd_config.cuh,
 * given to NVRTC as HOPPER_* macros and written into gen/fwd_variants.cuh for nvcc). The rule is a pure function of the problem
 * and the compile target, so a CPU test pins it; everything it declines runs on the mma.sync kernel
 * (flash_fwd.cu), which takes every case the flash backend supports, and the reason is returned.
 *
 * Covered: bfloat16/float16; H and Hv each in 1–4 boxes of 64 columns (kernel head dims Dk for Q/K
 * and Dv for V/O of 64, 128, 192 or 256, any pair: 192/192, 192/128, 128/64, 256/128, …), each with
 * at least 3/4 of its padded dim real (48…64, 96…128, 144…192, 192…256); MHA/GQA/MQA; causal in both
 * alignments, local windows, padding lengths, additive bias (f32/bf16/f16) and boolean masks (per
 * element, the mma.sync kernel's rules: flash/mask.cuh, schedule.cuh); log-sum-exp. Not covered:
 * float32, paged or packed KV (decode kernel), and any explicit ATTNLAB_FLASH_TILES choice (mma.sync
 * tiles).
 *
 * Tiles: 64 query rows per consumer warpgroup (two: 128 rows, three: 192), BN keys per K/V tile, two
 * stages, the consumers' GEMMs ping-ponged (FlashAttention-3's schedule: named barriers give the
 * tensor cores to one warpgroup while another runs its softmax). On the H200 (B=4, T=S=8192, N=16,
 * bf16, TFLOP/s non-causal / causal, the library and cuDNN in one run) this runs
 *   D=64  506.7 / 427.8 (cuDNN 459.0 / 422.4), D=128 617.9 / 556.0 (613.1 / 547.3),
 *   D=256 697.5 / 639.2 (665.9 / 617.1)
 *   (benchmarks/results/h200/forward/2026-12-01-hopper-late-pv-wait);
 *   D=192 (BN=112) 668.2 / 605.3 (cuDNN 621.1 / 575.3, mma.sync 230.7 / 234.8)
 *   (benchmarks/results/h200/forward/2026-12-01-h192-and-split-head-dims).
 * Ping-pong gives +0.5 / +1% at D=128 and +6 / +3% at D=256; at D=64 three consumers with ping-pong
 * give 465 / 405 against 392 / 356 for two consumers at BN=192
 * (benchmarks/results/h200/forward/2026-12-01-hopper-ping-pong). docs/internals/hopper-forward.md has
 * the tile and schedule measurements.
 */
import { config } from '../../../../config.js';
import { UnsupportedError } from '../../../../errors.js';
import type { AttentionProblem } from '../../../problem.js';
import { blockMaskOf, type FlashModifiers, modifiersOf, variantsRule } from '../modifiers.js';
import { FLASH_BIAS_CODES, type FlashBiasType } from '../sm80/variant.js';

/** Kernel head dims: 1–4 boxes of 64 columns (wgmma's P·V takes N = 64, 128, 192, 256). */
export type HopperHeadDim = 64 | 128 | 192 | 256;

export interface HopperVariant {
  readonly kernel: 'wgmma';
  readonly arch: 'sm_90a';
  readonly dtype: 'bfloat16' | 'float16';
  /**
   * The kernel's key head dim (Q and K) and value head dim (V and O): whole 64-column TMA boxes of
   * 128 bytes. H rounds up to keyDim and Hv to valueDim (hopperHeadDims): TMA reads the columns past
   * them as zeros, which add nothing to Q·Kᵀ and give zero output columns that are not written.
   */
  readonly keyDim: HopperHeadDim;
  readonly valueDim: HopperHeadDim;
  /** Element type of the additive bias, read per element as the mma.sync kernel does. */
  readonly bias: FlashBiasType;
  readonly mask: boolean;
  /** Keys per K/V tile. */
  readonly blockN: number;
  readonly stages: 2;
  /**
   * Consumer warpgroups of 64 query rows each: the block holds 64·consumers rows. One consumer runs
   * two blocks an SM (fwd_config.cuh MIN_BLOCKS), without ping-pong.
   */
  readonly consumers: 1 | 2 | 3;
  /** The consumers issue their GEMMs in turn (FlashAttention-3's ping-pong). */
  readonly pingpong: boolean;
  /**
   * The wait for P·V sits in its own basic block after the softmax (HOPPER_LATE_WAIT), so ptxas
   * cannot schedule it before the softmax: an ncu profile found it there, the softmax of
   * tile j waiting for P_{j−1}·V_{j−1} (9.8% of all stall samples at H=128).
   */
  readonly lateWait: boolean;
  /** Shared-memory descriptors stepped by constant adds in uniform registers (HOPPER_DESC_STEP). */
  readonly descStep: boolean;
  /**
   * 'dynamic': about one block per SM (HOPPER_DYNAMIC_GRID, hopper_fwd.cu run_dynamic), the K/V ring
   * and the ping-pong turns running on from one query block to the next; each block runs its first
   * item and then whatever a global work counter (zeroed before every launch: hopper.ts) hands it
   * next, longest first over L2-sized sections of heads. false: the 2-D grid, one item per block.
   */
  readonly persistent: false | 'dynamic';
  /**
   * FlashAttention-4's conditional rescale (HOPPER_RESCALE_SLACK, hopper/softmax.cuh): a row's running max
   * moves only when a tile rises more than this many powers of 2 above it, so most tiles skip
   * O *= alpha; the weights stay ≤ 2^slack and the result is the same after normalisation. 0: the
   * max moves on every rise.
   */
  readonly rescaleSlack: 0 | 8;
  /**
   * The score/mask modifier set compiled in (its generated source precedes the kernel's: modifiers.ts
   * kernelPrelude), or null; and whether the kernel takes a block mask (ATTNLAB_BLOCK_MASK: EMPTY
   * tiles are not loaded, FULL ones skip the mask modifier).
   */
  readonly modifiers: FlashModifiers | null;
  readonly blockMask: boolean;
}

/** Query rows per block: 64 per consumer warpgroup. */
export function hopperBlockM(v: Pick<HopperVariant, 'consumers'>): number {
  return 64 * v.consumers;
}
/** Threads per block: the producer warpgroup and the consumers, 128 each. */
export function hopperThreads(v: HopperVariant): number {
  return 128 * (v.consumers + 1);
}
/** The launch grid: (query blocks, B·N), or at most one block per SM (`multiprocessors`) on the dynamic grid. */
export function hopperGrid(
  v: HopperVariant,
  T: number,
  heads: number,
  multiprocessors: number,
): [number, number, number] {
  const blocks = Math.ceil(T / hopperBlockM(v));
  if (v.persistent !== false) return [Math.min(blocks * heads, multiprocessors), 1, 1];
  return [blocks, heads, 1];
}

/**
 * Tiles for kernel head dims Dk (Q, K) and Dv (V, O). Dk = Dv = 64 takes three consumers (192 rows
 * per K/V tile: its exponentials take as long as its GEMMs, so a third warpgroup keeps the tensor
 * cores fed; +19% with ping-pong in the harness) at BN=128, the largest tile whose registers fit the
 * 160 per thread that three consumers get (BN=144 spills 96 bytes, ptxas). Three K/V stages measured
 * +3% more at D=64 non-causal in the harness (478 vs 465) and nothing causal; not in the table.
 *
 * Every other pair takes two consumers (240 registers each) and the largest BN, a multiple of 16 (P·V
 * takes k-steps of 16 keys) up to 128 (BN=160/176 measured slower at D=128), that fits
 *   shared memory: 1024 + 128·Dk·2 (Q) + 2 stages · BN·(Dk + Dv)·2 (K, V) + 80 ≤ 227 KiB (232448);
 *   registers: a consumer holds S (BN/2 floats), the previous tile's P (BN/4) and O (Dv/2), and
 *     3/4·BN + Dv/2 ≤ 188, the D=256 tile's count (BN=80: 60 + 128), the most that ptxas has fitted
 *     in 240 with 0 spills (D=128: 96 + 64 = 160).
 * This keeps D=128 at 128 and D=256 at 80 (both measured best: 601 against 590 at BN=176; 717
 * against 612 at BN=64) and gives D=192 BN=112: 128 is out on both counts (shared memory
 * 1024 + 49152 + 196608 + 80 = 246864 > 232448; registers 96 + 96 = 192), 112 needs 222288 bytes and
 * 84 + 96 = 180 registers. ptxas (CUDA 13, sm_90a, nvcc -Xptxas -v): every pair's tile
 * compiles with 0 spills, except with a bias and a mask where Dv = 256 (192/256: 16 bytes, 256/256:
 * 48, as the D=256 tile has). Mixed pairs: 192/128 BN=128 (214096 bytes), 256/128 BN=96
 * (214096), 128/64 BN=128, 128/256 BN=80, 256/64 BN=128 (230480).
 */
export function tilesForHeadDims(
  keyDim: HopperHeadDim,
  valueDim: HopperHeadDim,
  modified: 'modifiers' | 'block mask' | null = null,
): { blockN: number; consumers: 2 | 3 } {
  if (keyDim === 64 && valueDim === 64 && !modified) return { blockN: 128, consumers: 3 };
  const registers =
    modified === 'block mask' ? BLOCK_MASK_REGISTERS : modified === 'modifiers' ? MODIFIER_REGISTERS : 188;
  let blockN = 16;
  for (let bn = 16; bn <= 128; bn += 16) {
    const shared = hopperSharedBytes({ consumers: 2, stages: 2, blockN: bn, keyDim, valueDim });
    if (shared <= HOPPER_SHARED_LIMIT && (3 * bn) / 4 + valueDim / 2 <= registers) blockN = bn;
  }
  return { blockN, consumers: 2 };
}

/**
 * With score/mask modifiers (`modified`) every pair takes two consumers: with three, D=64's 160
 * registers spill (ptxas, CUDA 13, sm_90a: ALiBi 8 bytes, a document mask with a block mask 1,484).
 * With a block mask as well the rule's count drops by 12 registers a thread for its walk over the
 * block kinds: a document mask spills 80 bytes at D=256 BN=80 (60 + 128 = 188), 8 at BN=64 (176, the
 * smallest tile with a wgmma wrapper); D=128 keeps 128 (160), D=192 takes 96 (168). Score modifiers
 * alone (ALiBi, soft-capping) keep the plain tiles without spilling.
 */
const BLOCK_MASK_REGISTERS = 176;

/**
 * Score modifiers evaluated on every score with no test (flash/mask.cuh modify_scores) take a few more
 * registers than the plain tile: D=256 at BN=80 (60 + 128 = 188) spilled 28 bytes with ALiBi and 24 with
 * softcap (ptxas, CUDA 13, sm_90a), BN=64 (176) none; D=192 keeps 112 (180), D=128 128 (160), 0 spills.
 */
const MODIFIER_REGISTERS = 180;

/**
 * The Hopper kernel takes modifiers up to T, S = 2^21 and compiles them with
 * ATTNLAB_POSITIONS_BELOW_2_22: the generated source then turns ints that its interval analysis keeps
 * within ±2^22 for q, kv < 2^22 (ALiBi's kv − q) into floats with an add and a subtract instead of I2F,
 * which runs on the exponentials' unit at a quarter of their issue rate. 2^21, not 2^22: the kernel also
 * evaluates a score modifier at the padding rows and keys of a tile's edge (up to 256 past T or S), whose
 * logits it discards. Longer sequences with modifiers run on the mma.sync kernel.
 */
export const MODIFIER_POSITIONS = 2 ** 21;

/** Dynamic shared memory one block may take on sm_90 (227 KiB, cudaDevAttrMaxSharedMemoryPerBlockOptin). */
export const HOPPER_SHARED_LIMIT = 227 * 1024;

/**
 * D=128 at long T takes three consumers on BN=80 keys (192 rows; the largest tile whose registers fit
 * 160 per thread: BN=96 spills 64 bytes, ptxas), so two warpgroups' softmax hides under the third's
 * GEMMs as at D=64. In the harness, slack 8 on both
 * (benchmarks/results/h200/forward/2026-12-01-hopper-harness-variants), B=4 N=16 bf16, TFLOP/s non-causal / causal: T=8192 623.7 / 548.8 against 594.2 / 531.7
 * (+5.0 / +3.2%, six interleaved reps), T=16384 (B=2) 640.6 / — against 616.3 (+3.9%); at T=2048 (B=16)
 * 538.4 / 388.6 against 542.9 / 403.5 (−1 / −4%: 2048 rows make 10⅔ blocks of 192, a third of the last
 * one idle). Unmeasured between 2k and 8k, so the switch sits at the first measured win. With both a
 * bias and a mask ptxas spills 20 bytes there, so that pair keeps the two-consumer tile.
 */
const D128_LONG = { blockN: 80, consumers: 3, fromT: 8192 } as const;

/** The tiles for `p`: D128_LONG's where it applies (H and Hv both padded to 128), else tilesForHeadDims. */
function hopperTiles(
  dims: { keyDim: HopperHeadDim; valueDim: HopperHeadDim },
  p: AttentionProblem,
): { blockN: number; consumers: 1 | 2 | 3 } {
  const d128 = dims.keyDim === 128 && dims.valueDim === 128;
  // With modifiers tilesForHeadDims' modified tiles; D=128 then keeps 128 × 128, whose
  // tiles align with a block mask's 128-key blocks (an 80-key tile over an empty and a full block is
  // PARTIAL).
  if (blockMaskOf(p) !== null) {
    const short = config().experimental.blockMaskTile === '64x64';
    if (short && dims.keyDim <= 128 && dims.valueDim <= 128) return BLOCK_MASK_SHORT_TILE;
    return tilesForHeadDims(dims.keyDim, dims.valueDim, 'block mask');
  }
  if (modifiersOf(p) !== null) return tilesForHeadDims(dims.keyDim, dims.valueDim, 'modifiers');
  if (d128 && p.T >= D128_LONG.fromT && !(p.bias && p.mask))
    return { blockN: D128_LONG.blockN, consumers: D128_LONG.consumers };
  return tilesForHeadDims(dims.keyDim, dims.valueDim);
}

/**
 * ATTNLAB_BLOCK_MASK_TILE=64x64 (off by default until a GPU run has timed it): with a block mask, 64
 * query rows × 64 keys on one consumer warpgroup, two blocks an SM. A block mask's items are short
 * (8 equal documents at T=8192 on 128 × 128: 1–8 key tiles, 4.5 on average), and on the 2-D grid with
 * one block an SM each item's fixed costs (the launch, the block mask's kinds, Q's load and the
 * pipeline's fill, the epilogue) stall the SM: 0.585 ms against ~0.25 ms of tile work at the dense
 * causal kernel's rate (H100, 31 waves of 132 items: ~11 µs of fixed cost an item beside ~7.6 µs
 * of tiles). Two resident blocks run one's fixed costs under the other's tiles. Its shared memory is
 * 1024 + 64·128·2 (Q) + 2 · 64·(128 + 128)·2 (K, V) + 80 = 82,000 bytes at D=128, twice that in the
 * SM's 228 KiB; its registers 128 a thread at launch (two blocks of 256 threads), 24 for the
 * producer and 232 for the consumer after setmaxnreg. A 64-key tile keeps a block mask's 128-key
 * blocks whole (two tiles each), and the 64-row item halves the diagonal's masked work.
 */
const BLOCK_MASK_SHORT_TILE = { blockN: 64, consumers: 1 } as const;

/**
 * The schedule (the same arithmetic, bit for bit: only the order of the instructions and of the
 * blocks changes). On: the P·V wait after the softmax and descriptors stepped by adds (harness +3–4%
 * at D=128, +4% at D=64, +7% at D=256; benchmarks/results/h200/forward/2026-12-01-hopper-late-pv-wait),
 * and the rescale slack of 8 (harness, mean of three interleaved runs, non-causal / causal: +2.1 / +2.3%
 * at D=128, +3.7 / +4.1% at D=256, +0.2 / +0.9% at D=64, +4.1 / +2.2% at D=128 T=2048; exact against
 * the float64 oracle with logits of std 16, sanitizers clean;
 * benchmarks/results/h200/forward/2026-12-01-hopper-harness-variants). The block orders measured
 * slower and removed are listed in docs/internals/hopper-forward.md.
 */
const SCHEDULE = {
  pingpong: true,
  lateWait: true,
  descStep: true,
  rescaleSlack: 8,
} as const;

/**
 * Work items (query blocks × heads) from which the dynamic grid runs: two waves of the H200's 132
 * SMs. Below that most blocks run one item, as on the 2-D grid, and the counter's reset (a memset
 * before the launch, ~1–2 µs of host time) would be all that changed.
 */
export const DYNAMIC_MIN_ITEMS = 264;

/**
 * The block order for `p` on `tiles`. In the harness (B·T = 32k, N=16, bf16, three interleaved reps,
 * one run; benchmarks/results/h200/forward/2026-12-01-hopper-block-order/hopper-dynamic-harness.txt),
 * the dynamic grid against the library's 2-D grid on the same tile, non-causal / causal:
 *   D=64 (192×128):  T=1024 +2.9 / +9.7%, T=2048 +0.5 / +7.3%, T=8192 −0.6 / +2.6%;
 *   D=128 (128×128): T=1024 +2.6 / +4.2%, T=2048 +0.1 / +3.0%;
 *   D=128 at T=8192 (D128_LONG's 192×80): +0.3 / −2.2% — stays on the 2-D grid;
 *   D=256 (128×80):  T=1024 +1.6 / +0.8%, T=2048 +1.4 / +2.9%, T=8192 +0.6 / +2.8%.
 * Causal rows give their blocks unequal work (a query block sees its keys up to the diagonal), so a
 * block that takes the next item when it is free balances them; without the mask every item is the
 * same work and only the short rows gain. Hence: dynamic where causal or T < 8192, not on
 * D128_LONG's tile, not with a bias or a mask (not measured there: those tiles keep the 2-D grid).
 * Its results are bit for bit the 2-D grid's (the same items, each computed alone). Score modifiers
 * keep the 2-D grid (the built-in masks' D=128 tile at T=8192 runs it). A block mask without a score
 * modifier takes the dynamic grid at Dk, Dv ≤ 128 (with ≥ DYNAMIC_MIN_ITEMS items and no bias or mask
 * tensor) where ATTNLAB_BLOCK_MASK_GRID=dynamic asked for it; that request is now refused with an
 * UnsupportedError (BLOCK_MASK_DYNAMIC_REFUSED): on an H100 the path failed racecheck (3 hazards) and ran
 * slower than the 2-D grid (0.612 ms against 0.585 for 8 documents). Its items are short (8 equal documents at T=8192: 1–8 key tiles of 128, 4.5 on average), and
 * on the 2-D grid each one's fixed costs (Q's load, the pipeline's fill, the block mask's kinds, the
 * epilogue) took 0.585 ms on an H100 against ~0.26 ms of tile work; the dynamic grid loads the
 * next item's Q, K and kinds under the current item's last tiles (hopper_fwd.cu
 * produce_dynamic_masked). Its producer then keeps 80 registers and each consumer 208, where D=256
 * spills 56 bytes (ptxas, sm_90a, a document mask), so D > 128 stays on the 2-D grid.
 */
export const BLOCK_MASK_DYNAMIC_REFUSED =
  "ATTNLAB_BLOCK_MASK_GRID=dynamic: the Hopper forward's dynamic grid with a block mask failed " +
  'compute-sanitizer racecheck on an H100 (3 shared-memory hazards in attnlab_hopper_fwd) and was slower ' +
  'than the 2-D grid (8 documents at T=8192: 0.612 ms against 0.585; causal as maskMod 2.023 against 1.831); ' +
  'unset it or set 2d (docs/internals/hopper-forward.md)';

function hopperGridOrder(
  p: AttentionProblem,
  tiles: { blockN: number; consumers: 1 | 2 | 3 },
  dims: { keyDim: HopperHeadDim; valueDim: HopperHeadDim },
): HopperVariant['persistent'] {
  const long128 = dims.keyDim === 128 && dims.valueDim === 128 && tiles.consumers === D128_LONG.consumers;
  const items = Math.ceil(p.T / hopperBlockM(tiles)) * p.B * p.N;
  if (p.bias || p.mask || items < DYNAMIC_MIN_ITEMS) return false;
  // Two consumers: a block mask's tiles always have them (tilesForHeadDims), and its dynamic-grid
  // producer's 80 registers leave three consumers too few (fwd_config.cuh). A score modifier beside the
  // block mask keeps the 2-D grid: in 208 registers ptxas spilled 28 bytes (D=128) and 124 (D=64) for
  // ALiBi with a causal mask modifier, none on the 2-D grid's 240 at D=64.
  // A block mask always runs the 2-D grid: ATTNLAB_BLOCK_MASK_GRID=dynamic is refused (BLOCK_MASK_DYNAMIC_REFUSED).
  if (blockMaskOf(p) !== null) {
    const scored = modifiersOf(p)?.hasScoreMod ?? false;
    const asked = config().experimental.blockMaskGrid === 'dynamic';
    if (asked && dims.keyDim <= 128 && dims.valueDim <= 128 && tiles.consumers === 2 && !scored) {
      throw new UnsupportedError('flash', BLOCK_MASK_DYNAMIC_REFUSED);
    }
    return false;
  }
  if (modifiersOf(p) !== null || long128) return false;
  return p.causal || p.T < D128_LONG.fromT ? 'dynamic' : false;
}

/**
 * Whether sm_90a runs the Hopper kernel when ATTNLAB_FLASH_KERNEL is unset: yes, since every GPU
 * suite passes with it on (scripts/gpu-verify.sh: test/gpu/forward/flash.test.ts with
 * ATTNLAB_FLASH_KERNEL=wgmma in bf16, fp16 and other tile configurations, the nan, backward and
 * decode suites, and compute-sanitizer's memcheck, racecheck and synccheck on the kernel). With `implementation` unset the measured dispatch table (dispatch-table.ts) still
 * decides per case between flash and cudnn; ATTNLAB_FLASH_KERNEL=mma keeps every case on mma.sync.
 */
export const HOPPER_BY_DEFAULT = true;

/**
 * The Hopper variant for `p` on target `arch`, or why the mma.sync kernel runs it instead.
 * `kernelChoice` is ATTNLAB_FLASH_KERNEL: 'wgmma' runs the covered cases on the Hopper kernel,
 * 'mma' keeps every case on mma.sync; unset follows HOPPER_BY_DEFAULT.
 */
export function hopperVariant(
  p: AttentionProblem,
  arch: string,
  kernelChoice: string | null | undefined = config().experimental.flashKernel,
  tilesOverride: string | null | undefined = config().experimental.flashTiles,
): { variant: HopperVariant } | { reason: string } {
  if (kernelChoice === 'mma') return { reason: 'ATTNLAB_FLASH_KERNEL=mma' };
  if (kernelChoice !== 'wgmma' && !HOPPER_BY_DEFAULT)
    return { reason: 'the Hopper kernel is opt-in (ATTNLAB_FLASH_KERNEL=wgmma)' };
  // ATTNLAB_FLASH_TILES names mma.sync tiles (BMxBNxWARPS): asking for them asks for that kernel.
  if (tilesOverride) return { reason: `ATTNLAB_FLASH_TILES=${tilesOverride} names mma.sync tiles` };
  if (arch !== 'sm_90a') return { reason: `target ${arch}: wgmma and setmaxnreg need sm_90a` };
  if (p.dtype !== 'bfloat16' && p.dtype !== 'float16') return { reason: `dtype ${p.dtype}` };
  const dims = hopperHeadDims(p.H, p.Hv);
  if (typeof dims === 'string') return { reason: dims };
  if (p.paged || p.packed) return { reason: 'paged or packed layout' };
  const variants = variantsRule(p);
  if (variants) return { reason: variants };
  if (modifiersOf(p) !== null && Math.max(p.T, p.S) > MODIFIER_POSITIONS)
    return {
      reason: `modifiers at T=${p.T}, S=${p.S}: the Hopper kernel takes them up to ${MODIFIER_POSITIONS} positions (ATTNLAB_POSITIONS_BELOW_2_22)`,
    };
  // 16-byte aligned Q, K, V (TMA's rule for global addresses) and head dims of multiples of 8 (its
  // rule for strides): flashSupport already requires both.
  const tiles = hopperTiles(dims, p);
  const blockMask = blockMaskOf(p) !== null;
  const persistent = hopperGridOrder(p, tiles, dims);
  const shared =
    hopperSharedBytes({ ...tiles, stages: 2, ...dims, persistent }) +
    hopperBlockMaskBytes({ ...tiles, blockMask, persistent }, p.S);
  if (shared > HOPPER_SHARED_LIMIT)
    return {
      reason: `a block mask over S=${p.S} keys: its tile bitmaps take the tiles' shared memory past ${HOPPER_SHARED_LIMIT} bytes (${shared})`,
    };
  return {
    variant: {
      kernel: 'wgmma',
      arch: 'sm_90a',
      dtype: p.dtype,
      ...dims,
      ...tiles,
      stages: 2,
      ...SCHEDULE,
      // Ping-pong passes the tensor cores between a block's consumers; one consumer has none to pass to.
      pingpong: SCHEDULE.pingpong && tiles.consumers > 1,
      persistent,
      bias: p.bias ? (p.bias.tensor.dtype as FlashBiasType) : 'none',
      mask: p.mask !== null,
      modifiers: modifiersOf(p),
      blockMask,
    },
  };
}

/**
 * The kernel head dims for H and Hv, or why there are none. Each row is read in boxes of 64 columns
 * (TMA zero-fills the part of the last box past H or Hv, as it does rows past T or S; a box wholly
 * past them is never asked of it): Q and K in Dk/64 boxes, V in Dv/64, each 1 to 4 (wgmma's P·V has
 * N = Dv ≤ 256; Q·Kᵀ takes Dk/16 k-steps). At least 3/4 of each padded dim must be real: H=96 runs
 * at 3/4 of the D=128 kernel's rate (≈ 440 TFLOP/s against 592 in the harness), still above the mma.sync
 * kernel's best (360 at H=128); below 3/4 that margin is gone.
 */
export function hopperHeadDims(
  H: number,
  Hv: number,
): { keyDim: HopperHeadDim; valueDim: HopperHeadDim } | string {
  const padded = (x: number) => 64 * Math.ceil(x / 64);
  for (const [name, x] of [
    ['H', H],
    ['Hv', Hv],
  ] as const) {
    if (padded(x) > 256)
      return `${name}=${x}: ${padded(x) / 64} boxes of 64 columns, the tiles take 1 to 4 (head dims up to 256)`;
    if (4 * x < 3 * padded(x))
      return `${name}=${x}: under 3/4 of the kernel's head dim ${padded(x)} (the mma.sync kernel is as fast there)`;
  }
  return { keyDim: padded(H) as HopperHeadDim, valueDim: padded(Hv) as HopperHeadDim };
}

/**
 * e.g. `flash-fwd.sm_90a.bf16.d128.128x128x3wg.pp.lw.ds.sl8.wgmma`, `….d64.192x128x4wg.pp.lw.ds.sl8.mask.wgmma`,
 * `….d192v128.128x128x3wg.pp.lw.ds.sl8.wgmma`: the kernel head dims (`d<Dk>` when Dv = Dk, else
 * `d<Dk>v<Dv>`), rows × keys per tile × warpgroups (the producer included), `.pp` for ping-pong, `.lw`
 * for the late P·V wait, `.ds` for stepped descriptors, `.dyn` for the dynamic grid, `.sl8` for the
 * rescale slack; `.mods-<key>` for a modifier set (its source's hash) and `.bmask` for a block mask,
 * as the mma.sync kernel's keys (variant.ts).
 */
export function hopperVariantKey(v: HopperVariant): string {
  const dtype = v.dtype === 'float16' ? 'f16' : 'bf16';
  const schedule = `${v.pingpong ? '.pp' : ''}${v.lateWait ? '.lw' : ''}${v.descStep ? '.ds' : ''}${v.persistent ? '.dyn' : ''}${v.rescaleSlack ? `.sl${v.rescaleSlack}` : ''}`;
  const tiles = `${hopperBlockM(v)}x${v.blockN}x${v.consumers + 1}wg${schedule}`;
  const dims = v.valueDim === v.keyDim ? `d${v.keyDim}` : `d${v.keyDim}v${v.valueDim}`;
  const parts = ['flash-fwd', v.arch, dtype, dims, tiles];
  if (v.bias !== 'none') parts.push(`bias-${{ float32: 'f32', bfloat16: 'bf16', float16: 'f16' }[v.bias]}`);
  if (v.mask) parts.push('mask');
  if (v.modifiers) parts.push(`mods-${v.modifiers.key}`);
  if (v.blockMask) parts.push('bmask');
  parts.push('wgmma');
  return parts.join('.');
}

/**
 * Dynamic shared memory: alignment slack, Q, STAGES K and V tiles, the mbarriers (q_full, 4 per
 * stage, q_empty) and the dynamic grid's item slot (hopper_smem_bytes).
 */
export function hopperSharedBytes(
  v: Pick<HopperVariant, 'consumers' | 'stages' | 'blockN' | 'keyDim' | 'valueDim'> &
    Partial<Pick<HopperVariant, 'persistent'>>,
): number {
  const kv = v.stages * v.blockN * (v.keyDim + v.valueDim) * 2;
  const words = 2 + 4 * v.stages + (v.persistent === 'dynamic' ? 1 : 0);
  return 1024 + hopperBlockM(v) * v.keyDim * 2 + kv + 8 * words;
}

/**
 * Shared memory after hopperSharedBytes for a block mask's tile bitmaps (fwd_scheduler.cuh): one bit
 * per key tile of BN keys, in one map of the item's kept tiles and one of each consumer's FULL tiles,
 * in 32-bit words: 1 + consumers maps of ceil(ceil(S/BN)/32) words, twice on the dynamic grid (one
 * set per item parity: item_bits). 0 without a block mask. At S=8192 and BN=128: 3 maps of 2 words,
 * 24 bytes (48 dynamic).
 */
export function hopperBlockMaskBytes(
  v: Pick<HopperVariant, 'consumers' | 'blockN' | 'blockMask'> & Partial<Pick<HopperVariant, 'persistent'>>,
  S: number,
): number {
  if (!v.blockMask) return 0;
  const sets = v.persistent === 'dynamic' ? 2 : 1;
  return sets * 4 * (1 + v.consumers) * Math.ceil(Math.ceil(S / v.blockN) / 32);
}

/**
 * The variant as the named fields of the kernel's configuration (src/kernels/hopper/fwd_config.cuh),
 * in that file's order: the one mapping from the table to the kernel, for NVRTC's -D set
 * (hopperDefines) and for the generated header (hopperConfigStruct).
 */
export function hopperConfigFields(v: HopperVariant): ReadonlyArray<readonly [string, number | boolean]> {
  return [
    ['key_dim', v.keyDim],
    ['value_dim', v.valueDim],
    ['block_n', v.blockN],
    ['stages', v.stages],
    ['consumers', v.consumers],
    ['fp16', v.dtype === 'float16'],
    ['bias', FLASH_BIAS_CODES[v.bias]],
    ['mask', v.mask],
    ['pingpong', v.pingpong],
    ['late_wait', v.lateWait],
    ['desc_step', v.descStep],
    ['dynamic_grid', v.persistent === 'dynamic'],
    ['rescale_slack', v.rescaleSlack],
  ];
}

/**
 * The -D set of the kernel's extern "C" entry: HOPPER_<FIELD> per configuration field,
 * ATTNLAB_BLOCK_MASK with a block mask, and with modifiers ATTNLAB_POSITIONS_BELOW_2_22 (the rule
 * declines T or S past MODIFIER_POSITIONS) and ATTNLAB_FAST_TANH (tanh.approx.f32 for `tanh`: the
 * kernel is bf16/fp16 only, and the approximation's 2^-11 is under their rounding of the scores;
 * src/variants/cuda.ts); the modifier set's own macros come with its source.
 */
export function hopperDefines(v: HopperVariant): Record<string, number> {
  const fields: Array<[string, number]> = hopperConfigFields(v).map(([field, value]) => [
    `HOPPER_${field.toUpperCase()}`,
    Number(value),
  ]);
  if (v.blockMask) fields.push(['ATTNLAB_BLOCK_MASK', 1]);
  if (v.modifiers) fields.push(['ATTNLAB_POSITIONS_BELOW_2_22', 1], ['ATTNLAB_FAST_TANH', 1]);
  return Object.fromEntries(fields);
}

export const HOPPER_KERNEL = { file: 'hopper/hopper_fwd.cu', name: 'attnlab_hopper_fwd' } as const;
