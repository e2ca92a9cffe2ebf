/**
 * The tile-size table of the CUDA flash kernel: for each padded head dim, the query rows per block
 * (BM), the keys per K/V tile (BN) and the warps per block, each with the reason it was chosen.
 *
 * Register counts are ptxas's for sm_90a (nvcc 13.0, `-Xptxas -v`), bf16, no bias or mask;
 * shared memory is (BM + 2·BN)·(D + 8)·2 bytes (Q tile, one K and one V buffer, padded rows).
 * Timings behind the choices are in docs/internals/mma-forward.md.
 */
import { config } from '../../../../config.js';
import { InvalidArgumentError } from '../../../../errors.js';

export interface FlashTiles {
  /** Query rows per block: 16 × (m-tiles per warp) × warps. */
  readonly blockM: number;
  /** Keys per K/V tile streamed through shared memory. */
  readonly blockN: number;
  readonly warps: number;
  /** K/V buffers: 1 = FA2's overlap (V loads during Q·Kᵀ, K during P·V), 2 = double buffer. */
  readonly stages: 1 | 2;
}

/** Head dims are padded to a multiple of 16 (one mma k-step), at least 32; padded columns load as zeros. */
export function paddedHeadDim(H: number, Hv: number): number {
  return Math.max(32, Math.ceil(Math.max(H, Hv) / 16) * 16);
}

/**
 * The tiles for padded head dim D (32..256, multiple of 16). `ATTNLAB_FLASH_TILES=BMxBNxWARPS`
 * (with `s2` appended for two K/V stages, e.g. 128x64x4s2) overrides the table, so a benchmark can
 * compare configurations without a rebuild.
 */
export function chooseFlashTiles(D: number, override = config().experimental.flashTiles): FlashTiles {
  if (override) return parseTiles(override);
  if (D <= 128) {
    // 4 warps × 32 rows (FA2's choice): each K/V fragment read from shared memory feeds two mmas,
    // and at ≤ 255 registers (255 at D=128, 238 at D=64, no spill) two blocks share an SM, so one
    // block's __syncthreads never idles the tensor cores. At H=128: 365 TFLOP/s against 327 for
    // 128×32×4 and 255 for 128×128×8; a 128×64×8 kernel of 168 registers reads 241 (one 68 KiB block
    // per SM by registers). H=64: 296 against 281 (128×32×4) and 215 (128×128×8).
    return { blockM: 128, blockN: 64, warps: 4, stages: 1 };
  }
  // D > 128: 32 rows per warp would need D + 64 accumulator registers per lane and spills (1160 B at
  // D=256: 108 TFLOP/s), so 16 rows per warp, 8 warps. 128×128×8 (255 registers, no spill, 198 KiB
  // at D=256): 290 / 281 TFLOP/s (non-causal / causal), against 267 / 256 for 128×64×8.
  return { blockM: 128, blockN: 128, warps: 8, stages: 1 };
}

function parseTiles(text: string): FlashTiles {
  const match = /^(\d+)x(\d+)x(\d+)(s2)?$/.exec(text.trim());
  const expected =
    'BMxBNxWARPS[s2] with BM a multiple of 16·WARPS and BN a multiple of 16, e.g. 128x64x4 or 128x64x4s2';
  if (!match) throw new InvalidArgumentError('ATTNLAB_FLASH_TILES', expected, JSON.stringify(text));
  const [blockM, blockN, warps] = [Number(match[1]), Number(match[2]), Number(match[3])];
  if (warps < 1 || warps > 16 || blockM % (16 * warps) !== 0 || blockN % 16 !== 0 || blockN === 0) {
    throw new InvalidArgumentError('ATTNLAB_FLASH_TILES', expected, JSON.stringify(text));
  }
  return { blockM, blockN, warps, stages: match[4] ? 2 : 1 };
}
