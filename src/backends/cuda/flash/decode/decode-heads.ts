/**
 * The decode kernel that reads whole token rows (src/kernels/decode/flash_decode_heads.cu): one
 * block serves HB kv heads of a sequence, so each key's K and V rows of those heads (HB·H contiguous
 * elements, 2 KB at K=8 and H=128, in the dense, paged and packed layouts alike) arrive by one bulk
 * copy each. The row-tile kernel (flash_decode.cu) has one block per kv head, each copying its
 * 256-byte slice of the same rows: on a paged cache (block 16, K=8) ncu saw L2 92% busy and DRAM at
 * 75% (benchmarks/results/h200/decode/2026-12-01-row-tile-split-counts).
 *
 * The table (why each number):
 * - 8 warps a block, one m16 row tile (a kv head's GQA-packed rows, or 16 of them) each, HB =
 *   the largest power of two dividing K up to 8 / RTH and maxHeadsPerBlock (measured), and SLICES = 8 / (HB·RTH) warps splitting a
 *   tile's keys where there are fewer row tiles than warps (K=4: 2 slices, MQA N=32: 4);
 * - a stage of TK keys ≈ 64 KB of K+V (TK·HB·(H+Hv)·2 bytes: K=8, H=128: 16 keys), 3 stages: ~200 KB,
 *   one block per SM with 128 KB in flight while it computes on the third; 2 stages for 8 heads on a
 *   dense cache, measured no slower in two runs and faster in five of six pairs (B=64 S=16k, B=8
 *   S=128k, B=128 S=8k: 4214/4214/4257 and 4222/4228/4292 GB/s against 3 stages' 4172/4251/4246 and
 *   4241/4154/4079, benchmarks/results/h200/decode/2026-12-01-heads-kernel-cudnn-paged): at one block per SM the DRAM stream, not
 *   the depth in flight, holds it;
 * - H and Hv multiples of 16 up to 128 (the tile keeps no padded head-dim columns; larger heads
 *   would leave one stage), sm_90 bulk copies, rows at 16-byte-aligned addresses.
 */
import { SUPPORTED, type Support, unsupported } from '../../../backend.js';
import { type AttentionProblem, cachedTokens } from '../../../problem.js';
import { archMajor, keyValueAligned } from './decode-common.js';

export interface DecodeHeadsVariant {
  readonly kind: 'heads';
  readonly arch: string;
  readonly fp16: boolean;
  readonly headDim: number;
  readonly valueHeadDim: number;
  /** kv heads per block (HB), row tiles per kv head (RTH), warps per row tile (SLICES). */
  readonly heads: number;
  readonly rowTiles: number;
  readonly slices: number;
  /** Keys per warp per tile (KPW): TK = slices · keysPerWarp. */
  readonly keysPerWarp: number;
  readonly stages: number;
}

const WARPS = 8;
const STAGE_TARGET_BYTES = 64 * 1024;

/** Rows of the kernel's K and V token rows that fit a stage, as HeadsConfig computes. */
export function headsTileKeys(v: DecodeHeadsVariant): number {
  return v.slices * v.keysPerWarp;
}

/** Shared memory of one block, as HeadsConfig::SMEM. */
export function headsSharedBytes(v: DecodeHeadsVariant): number {
  const keys = headsTileKeys(v);
  const stage = keys * (v.heads * v.headDim + 8) * 2 + keys * (v.heads * v.valueHeadDim + 8) * 2;
  const merge = WARPS * 16 * (v.valueHeadDim + 2) * 4;
  return 64 + Math.max(v.stages * stage, merge);
}

/** Why the heads kernel cannot take `p` on `arch`, before any device is asked. */
export function headsSupport(p: AttentionProblem, arch: string): Support {
  if (archMajor(arch) < 90)
    return unsupported(`${arch}: the heads decode kernel copies rows in bulk (sm_90)`);
  if (p.H % 16 || p.Hv % 16 || p.H > 128 || p.Hv > 128)
    return unsupported(`H=${p.H}, Hv=${p.Hv}: the heads decode kernel takes multiples of 16 up to 128`);
  if ((p.T * p.N) / p.K > 64) return unsupported(`T·N/K = ${(p.T * p.N) / p.K} rows per kv head, at most 64`);
  if (!keyValueAligned(p)) return unsupported('key/value not 16-byte aligned: bulk copies need it');
  if (p.B > 65535) return unsupported(`B = ${p.B}: the grid's z dimension is at most 65535`);
  return SUPPORTED;
}

/**
 * Cached tokens (B × S, or the sum of the lengths) from which the heads kernel is the faster one, as
 * measured on the H200 (benchmarks/results/h200/decode/2026-12-01-heads-kernel-cudnn-paged, kernels alone, N=32, H=128, K=8): at
 * B=16 S=8k and B=1 S=128k it reads 3.68–3.70 / 3.52–3.54 TB/s against the row-tile kernel's
 * 3.59 / 3.22–3.55; at B=1 and S=2k, 8k, 32k the row-tile kernel's B·K blocks split better (491 vs 397,
 * 1406 vs 1092, 2612 vs 2429 GB/s): one heads block per sequence reads only ~36 GB/s, so a short
 * cache is split into slices too short to amortise a block's start and merge.
 */
export const HEADS_MIN_TOKENS = 131072;

/** Whether the measured rule prefers the heads kernel for `p` (where both can run). */
export function headsPreferred(p: AttentionProblem): boolean {
  return cachedTokens(p) >= HEADS_MIN_TOKENS;
}

/**
 * The most kv heads one block serves, as measured (same record, K=8): 4 for a paged cache (4.10–4.22
 * TB/s against 8's 4.03–4.17 at 1M tokens, faster in 11 of 12 pairs: 1 KB rows of scattered pages), 8 for
 * dense and packed caches with B ≥ 8 (4.17–4.25 against 4.08–4.18), 4 below (B=1 S=128k: 3.54 vs 3.39,
 * twice the blocks to split over the GPU).
 */
export function maxHeadsPerBlock(p: AttentionProblem): number {
  return p.paged || p.B < 8 ? 4 : WARPS;
}

/** The heads kernel's configuration for `p` (the header's table). */
export function headsVariant(p: AttentionProblem, arch: string, sharedLimit: number): DecodeHeadsVariant {
  const rows = Math.ceil((p.T * p.N) / p.K);
  const rowTiles = rows <= 16 ? 1 : rows <= 32 ? 2 : 4;
  const most = Math.min(WARPS / rowTiles, maxHeadsPerBlock(p));
  let heads = 1;
  while (heads * 2 <= most && p.K % (heads * 2) === 0) heads *= 2;
  const slices = WARPS / (heads * rowTiles);
  // TK ≈ 64 KB of K+V, a power of two, one thread per K or V row (2·TK ≤ 256), 16…64 keys a warp.
  const rowBytes = heads * (p.H + p.Hv) * 2;
  let keys = 16;
  while (keys * 2 * rowBytes <= STAGE_TARGET_BYTES && keys * 2 <= (WARPS * 32) / 2) keys *= 2;
  const keysPerWarp = Math.min(64, Math.max(16, keys / slices));
  const base: DecodeHeadsVariant = {
    kind: 'heads',
    arch,
    fp16: p.dtype === 'float16',
    headDim: p.H,
    valueHeadDim: p.Hv,
    heads,
    rowTiles,
    slices,
    keysPerWarp: Math.min(keysPerWarp, Math.floor((WARPS * 32) / 2 / slices)),
    stages: heads === 8 && !p.paged ? 2 : 3,
  };
  return headsSharedBytes(base) <= sharedLimit ? base : { ...base, stages: 2 };
}

export function headsVariantKey(v: DecodeHeadsVariant): string {
  return `flash-decode-heads.${v.arch}.${v.fp16 ? 'f16' : 'bf16'}.d${v.headDim}${
    v.valueHeadDim !== v.headDim ? `v${v.valueHeadDim}` : ''
  }.${v.heads}x${v.rowTiles}x${v.slices}.k${headsTileKeys(v)}s${v.stages}`;
}

/** NVRTC defines of flash_decode_heads.cu for `v`. */
export function headsDefines(v: DecodeHeadsVariant): Record<string, number> {
  return {
    DECODE_HEADS_D: v.headDim,
    DECODE_HEADS_DV: v.valueHeadDim,
    DECODE_FP16: v.fp16 ? 1 : 0,
    DECODE_HEADS_HB: v.heads,
    DECODE_HEADS_RTH: v.rowTiles,
    DECODE_HEADS_SLICES: v.slices,
    DECODE_HEADS_KPW: v.keysPerWarp,
    DECODE_STAGES: v.stages,
  };
}
