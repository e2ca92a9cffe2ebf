/**
 * The TMA decode kernel (src/kernels/decode/flash_decode_ws.cu with decode_tma.cuh): the heads kernel's
 * MQA configuration (one kv head a block, two m16 row tiles, 4 warps splitting a tile's 128 keys) with
 * one producer warp that brings each tile in as a handful of tensor copies (TMA, 128-byte swizzle) on
 * full/empty mbarriers, so no consumer warp copies rows or waits for another during the loop.
 *
 * Why (benchmarks/results/h200/decode/2026-12-01-tma-producer-k1, H200, kernels alone, B=64 S=16k N=32 K=1 H=128 bf16): the
 * heads kernel reads 2.80–2.81 TB/s paged (block 16 and 64) and 2.96–3.00 dense; its 8 warps meet at a
 * barrier every tile and each issues one row copy. This kernel reads 3.69–3.71 paged16 (1.32×), 3.52–3.58
 * paged64 and 3.59–3.62 dense (1.20–1.28×) in the same runs; one producer warp issuing the 256 row copies
 * itself was 3× slower (~68 clocks a copy), which the tensor copies remove (4 a dense tile, 32 a block-16
 * tile, 8 at block 64).
 *
 * The table (tmaPreferred, tmaPreferredShort): on sm_90 with H = Hv = 128, dense or paged with power-of-two
 * blocks ≥ 8 (a box of a page's rows; the swizzle atom is 8 rows), not packed keys, and up to 32 rows a kv
 * head, it replaces the heads kernel wherever that one would run (B·S ≥ 128k cached tokens: at K=8, 4413 /
 * 4388 / 4376 GB/s dense / block 16 / block 64 against 4229 / 4252 / 4258, kernels alone, B=64 S=16k,
 * benchmarks/results/h200/decode/2026-12-02-tma-kernel-every-k) and, on shorter caches of 32k tokens or more, the row-tile kernel for
 * MQA-like rows (17–32 a kv head: 1.6–1.9× at B=1 S=32k, kernels alone; below, the host decides).
 * decodeTuning.kernel = 'tma' forces it wherever it can run.
 *
 * Two forms (tmaRowGroups picks one; benchmarks/results/h200/decode/2026-12-02-k1-loop-overheads, kernels alone, H200, B=64 S=16k):
 * - one block a key range with both row tiles (4 warps of 32 keys each), or with its one where a kv head has at
 *   most 16 rows (8 warps of 16 keys: oneBlockRowTiles);
 * - row groups: two blocks a key range, each one row tile (8 warps of 16 keys), each reading the range; the
 *   second read of a tile hits the L2. A row group replaces a split: where the first form splits the keys
 *   (B=64: two splits), this one reads 4175 GB/s dense against 3910 with no combine, 3957 against 3765 at
 *   block 64. Where the first form runs one split (B=128 S=8k) row groups would make two waves (3716
 *   against 4058), and a block reading a whole range issues twice the copies: with 16-row pages that
 *   starves it (3671 against the first form's 3811), so pages under 32 rows keep the first form unless its
 *   grid fills at most half the GPU (B=1 S=32k, 32 blocks: 786 against 602) — or the pair is a
 *   cluster (tmaMulticast: on pages of 16 rows and more the two blocks are one two-CTA cluster whose producers
 *   each copy half of every tile into both, TMA multicast; +0.5–2.1% at K=1, benchmarks/results/h200/decode/2026-12-02-1m-tokens-k1-multicast).
 * Boxes: a copy moves one 128-byte half of a page's rows (or a dense tile's 128), or, grouped, both halves
 * of `boxGroup` rows (a 5-D map whose third dimension is the half): at block 16 the first form reads 3811
 * with groups of 8 against 3574 with half boxes (+7%; 3925 against 3680 at B=128), and row groups read
 * pages of 32 rows and more in groups of 32 (3957 against 3577 with half boxes at block 64).
 */
import type { DependentLaunchChoice } from '../../../../config.js';
import { InvalidArgumentError } from '../../../../errors.js';
import { SUPPORTED, type Support, unsupported } from '../../../backend.js';
import { type AttentionProblem, cachedTokens } from '../../../problem.js';
import { cachedTiledMap, type TiledMapSpec } from '../../ffi/tensor-map.js';
import { archMajor, keyValueAligned } from './decode-common.js';
import type { DecodeHeadsVariant } from './decode-heads.js';

export interface DecodeTmaVariant extends Omit<DecodeHeadsVariant, 'kind'> {
  readonly kind: 'tma';
  /** ws_softmax's FAST path: masks skipped on tiles every row sees whole, the max as an fmaxf tree. */
  readonly fast: boolean;
  /** Blocks that share a key range, each `rowTiles` of the kv head's rows (1, or 2: row groups). */
  readonly rowGroups: 1 | 2;
  /** Rows whose two 128-byte halves one copy moves (0: a copy moves one half). */
  readonly boxGroup: 0 | 8 | 16 | 32;
  /**
   * Row groups as a cluster of two CTAs whose producers each copy half of every tile into both (TMA
   * multicast): one L2 read of a tile for the pair instead of two, and the pair in step. False in the
   * one-block form (tmaMulticast says where).
   */
  readonly multicast: boolean;
}

/** The kernel's name in flash_decode_ws.cu. */
export const TMA_KERNEL = 'attnlab_flash_decode_tma';
const STAGES = 3;
/** Keys a stage holds, in either form: 4 warps × 32 or 8 × 16. */
const TILE_KEYS = 128;
/** Rows of one m16 row tile. */
const ROW_TILE_ROWS = 16;
/** Rows a key range serves: two m16 row tiles of one kv head (one a block with row groups). */
const MAX_ROWS = 32;
/** The smallest page that two independent row-group blocks read on a full GPU (16-row pages starve them; clusters take 16). */
const ROW_GROUP_MIN_PAGE = 32;
/**
 * The most keys one block of a row group reads. The group's second read of a tile is an L2 hit only while
 * the tile is still there: at ~4.4 TB/s the H200's 50 MB L2 turns over in ~11 µs, a few tiles of one block's
 * progress, so the two blocks may drift apart only that far, and over a longer range they drift further.
 * Measured (benchmarks/results/h200/decode/2026-12-02-cache-length-row-groups, B=64 K=1, one split in row groups against the
 * one-block form's two, dense / block 64, GB/s): S=32k 4433 / 4253 against 4294 / 4190, S=48k 4429 / 4349
 * against 4386 / 4329, S=64k 3842 / 3809 against 4417 / 4354 (another run: 4455 at S=32k, 3970 at S=64k).
 */
export const ROW_GROUP_MAX_KEYS = 49152;

const powerOfTwo = (x: number) => x > 0 && (x & (x - 1)) === 0;

/** Why the TMA kernel cannot take `p` on `arch`, before any device is asked. */
export function tmaSupport(p: AttentionProblem, arch: string): Support {
  if (archMajor(arch) < 90) return unsupported(`${arch}: the TMA decode kernel needs sm_90 tensor copies`);
  if (p.H !== 128 || p.Hv !== 128)
    return unsupported(`H=${p.H}, Hv=${p.Hv}: the TMA decode kernel takes 128`);
  const rows = (p.T * p.N) / p.K;
  if (rows > MAX_ROWS)
    return unsupported(`T·N/K = ${rows} rows per kv head, the TMA decode kernel takes ${MAX_ROWS}`);
  if (p.packed?.keyValueSeqOffsets)
    return unsupported('packed keys: the TMA decode kernel reads dense or paged caches');
  if (p.paged && (p.paged.blockSize < 8 || !powerOfTwo(p.paged.blockSize)))
    return unsupported(`block size ${p.paged.blockSize}: the TMA decode kernel takes powers of two from 8`);
  if (!keyValueAligned(p)) return unsupported('key/value not 16-byte aligned: tensor maps need it');
  if (p.B > 65535) return unsupported(`B = ${p.B}: the grid's z dimension is at most 65535`);
  return SUPPORTED;
}

/**
 * Whether the measured rule runs this kernel for `p` where the heads kernel would run (B·S ≥ 128k cached
 * tokens): wherever it can. Kernels alone, same run (benchmarks/results/h200/decode/2026-12-02-tma-kernel-every-k, H200,
 * B=64 S=16k): at K=8 (4 rows a kv head, one block each) it reads 4413 / 4388 / 4376 GB/s dense / block 16
 * / block 64 against the heads kernel's 4229 / 4252 / 4258 (4 kv heads a block), and at K=1
 * 4183 / 3780 / 4056 against 3.0 / 2.8 / 2.8 TB/s.
 */
export function tmaPreferred(p: AttentionProblem, arch: string): boolean {
  return tmaSupport(p, arch).ok;
}

/**
 * Cached tokens (B·S, or the sum of the lengths) from which this kernel takes short caches from the
 * row-tile kernel. Kernels alone it is faster from the shortest cache measured (B=1 K=1, dense / block 16 /
 * block 64, benchmarks/results/h200/decode/2026-12-02-tma-kernel-every-k: S=2k 85 / 84 / 84 GB/s against 72 / 62 / 62, S=8k
 * 279 / 271 / 276 against 200 / 161 / 161, S=32k 828 / 786 / 815 against 496 / 407 / 409), but its host
 * path is a few µs longer (two tensor maps, a third launch argument: 15 against 11–14 µs a call on the
 * fake driver, ~25–60 µs on the device machine) and below ~32k tokens the host, not the kernel, sets a
 * call's time: per call, 20 back to back, it read 25 / 123 GB/s at S=2k / 8k where the row-tile kernel
 * read 71 / 199, and 664 against 498 at S=32k.
 */
export const TMA_SHORT_MIN_TOKENS = 32768;

/**
 * Whether the measured rule runs this kernel for `p` where the row-tile kernel would (under 128k cached
 * tokens): for MQA-like rows (17–32 a kv head) from TMA_SHORT_MIN_TOKENS, in row groups. With 4 rows a kv
 * head (K=8) the row-tile kernel's blocks split a short cache as well (B=1 S=2k dense: 645 GB/s against
 * 599 alone) and it stays.
 */
export function tmaPreferredShort(p: AttentionProblem, arch: string): boolean {
  return cachedTokens(p) >= TMA_SHORT_MIN_TOKENS && (p.T * p.N) / p.K > 16 && tmaSupport(p, arch).ok;
}

/**
 * Rows a copy moves both halves of, as the header measured: dense caches and the one-block form's pages of 32
 * rows and more take half boxes; its smaller pages groups of 8, or with one row tile a 16-row page in one box
 * (benchmarks/results/h200/decode/2026-12-02-1m-tokens-k8-k4, GB/s a call at B=64 S=16k / B=128 S=8k, block 16: K=4, 4438 /
 * 4467 against 4375–4379 / 4376–4381 with groups of 8 in the runs before and after, half boxes 4448 / 4319;
 * interleaved, two processes each, K=8 4452–4454 / 4443–4444 against 4405–4406 / 4339–4342 and K=4
 * 4342–4349 / 4339 against 4274–4277 / 4262–4263; the two-tile MQA form measures the other way,
 * 3702 against 3772); row groups' pages groups of up to 32 (a group never spans two pages).
 */
function boxGroupFor(p: AttentionProblem, rowGroups: 1 | 2, rowTiles: 1 | 2): DecodeTmaVariant['boxGroup'] {
  const page = p.paged?.blockSize ?? 0;
  if (!page) return 0;
  if (rowGroups === 2) return Math.min(page, 32) as 8 | 16 | 32;
  if (page === 16 && rowTiles === 1) return 16;
  return page <= 16 ? 8 : 0;
}

/**
 * decodeTuning.boxGroup, for measuring a box the rule does not pick: 0 (a copy a half), or 8, 16 or 32 rows
 * (both halves a copy) that tile the 128-key stage and, paged, stay inside a page.
 */
function checkedBoxGroup(p: AttentionProblem, group: number): DecodeTmaVariant['boxGroup'] {
  const page = p.paged?.blockSize ?? Number.POSITIVE_INFINITY;
  if (group !== 0 && !((group === 8 || group === 16 || group === 32) && group <= page))
    throw new InvalidArgumentError(
      'decodeTuning.boxGroup',
      `0, 8, 16 or 32${p.paged ? ` rows, at most the block size ${page}` : ' rows'}`,
      String(group),
    );
  return group as DecodeTmaVariant['boxGroup'];
}

/**
 * Row tiles of the one-block form: one (8 warps of 16 keys) where a kv head has at most 16 rows, else two
 * (4 warps of 32 keys each). Why: with two tiles at K=8 (4 rows a kv head) or K=4 (8) the second is all
 * padding, and half the tensor-core and softmax work of every key is thrown away. With the host hidden that
 * costs no time, but call after call the H200 sits at its 700 W cap and lowers its SM clocks, and then it does.
 * Measured (benchmarks/results/h200/decode/2026-12-02-1m-tokens-k8-k4, interleaved, two processes each, GB/s a call / kernels
 * alone, mean SM clock and share of nvidia-smi samples power-capped during the calls): K=4 B=64 S=16k one tile
 * 4412–4417 / 4444 dense, 4270 / 4277 block 16, 4363 / 4400 block 64 at ~1.9 GHz, 8–18% capped; two tiles
 * 4139–4194 / 4390, 3869–3905 / 4320, 4147–4205 / 4345 at ~1.75 GHz, 75–83% capped (B=128 S=8k alike: 4335 /
 * 4268 / 4329 against 4060 / 3843 / 4066). At K=8 both read the same (4396–4419 against 4383–4430) with 42–50%
 * of samples capped against 85–95%. `forced` (decodeTuning.rowTiles): two where one would do, for measuring;
 * one cannot hold more than 16 rows, so there it leaves two.
 */
function oneBlockRowTiles(p: AttentionProblem, forced?: 1 | 2): 1 | 2 {
  const rows = (p.T * p.N) / p.K;
  if (rows > ROW_TILE_ROWS) return 2;
  return forced ?? 1;
}

/**
 * The kernel in `rowGroups` form for `p` (splitVariant picks it through tmaRowGroups): one block a key
 * range with one row tile of 8 warps or two of 4 (oneBlockRowTiles), or two blocks of one row tile of 8 warps.
 */
export function tmaVariant(
  p: AttentionProblem,
  arch: string,
  rowGroups: 1 | 2 = 1,
  form: TmaForm = {},
): DecodeTmaVariant {
  const { boxGroup: forcedBoxGroup, rowTiles: forcedRowTiles, multicast = false } = form;
  const rowTiles = rowGroups === 2 ? 1 : oneBlockRowTiles(p, forcedRowTiles);
  const slices = rowTiles === 2 ? 4 : 8;
  return {
    kind: 'tma',
    arch,
    fp16: p.dtype === 'float16',
    headDim: 128,
    valueHeadDim: 128,
    heads: 1,
    rowTiles,
    slices,
    keysPerWarp: TILE_KEYS / slices,
    stages: STAGES,
    fast: true,
    rowGroups,
    boxGroup:
      forcedBoxGroup === undefined ? boxGroupFor(p, rowGroups, rowTiles) : checkedBoxGroup(p, forcedBoxGroup),
    multicast: rowGroups === 2 && multicast,
  };
}

/**
 * What tmaVariant takes beside the row groups: forced box rows and row tiles, clusters. The tensor copies
 * are the only loader: an L2 prefetch by the producer, two cp.async producer warps and V through producer
 * warps' registers all measure slower (0.27–0.94×; docs/internals/decode.md, "Tried and not kept").
 */
export interface TmaForm {
  readonly boxGroup?: number;
  readonly rowTiles?: 1 | 2;
  readonly multicast?: boolean;
}

/**
 * Whether row groups run as a cluster of two CTAs whose producers each copy half of every tile into both
 * (TMA multicast; flash_decode_ws.cu MULTICAST): on paged caches of 16 rows and more, where two independent
 * blocks each issue a tile's page copies; dense caches keep two blocks, each reading a tile from the L2 after
 * the other (`forced`: decodeTuning.multicast). Measured (benchmarks/results/h200/decode/2026-12-02-1m-tokens-k1-multicast, H200,
 * interleaved, two processes each, K=1, GB/s a call): B=64 S=16k block 16 3916–3919 against the rule's one-block
 * form 3835–3837 (+2.1%; two independent blocks read 3661–3671 there), block 64 4112–4117 against
 * 4091–4096, B=8 S=128k block 16 / 64 3817 / 4018–4019 against 3778 / 3963–3967; dense 4246–4250 against
 * 4262–4265 and 4128–4130 against 4129–4132. Each consumer warp releases a stage in both CTAs with a plain
 * remote arrive: with release at cluster scope (a fence a warp a tile) the same kernel read 0.68×.
 */
export function tmaMulticast(p: AttentionProblem, forced?: boolean): boolean {
  if (forced !== undefined) return forced;
  return (p.paged?.blockSize ?? 0) >= 16;
}

/**
 * Row groups or not (the header's measurements): two blocks a key range where the one-block form would
 * split it (`splitsOfOne` ≥ 2) and both of them have rows (17–32 a kv head), with pages, if any, of 32 rows
 * or more, or of any size where the one-block grid (B·K·splitsOfOne blocks) fills at most half of the
 * `multiprocessors`: the copies that starve row groups of 16-row pages at B=64 (128 blocks: 3671 against
 * 3811 GB/s) do not at B=1 (32 blocks: 786 against 602). `groupedKeys`, the keys a block
 * of the grouped form would read (its longest range over its split count), at most ROW_GROUP_MAX_KEYS.
 * Where the pair is a cluster sharing its copies (tmaMulticast, `multicast` forcing it as decodeTuning does),
 * each CTA issues half of them and 16-row pages fit as well. decodeTuning.rowGroups (`forced`) forces either.
 */
export function tmaRowGroups(
  p: AttentionProblem,
  splitsOfOne: number,
  groupedKeys: number,
  multiprocessors: number,
  forced?: 1 | 2,
  multicast?: boolean,
): 1 | 2 {
  if (forced) return forced;
  const rows = (p.T * p.N) / p.K;
  const fewBlocks = p.B * p.K * splitsOfOne <= multiprocessors / 2;
  const shared = tmaMulticast(p, multicast);
  const pagesFit = !p.paged || p.paged.blockSize >= ROW_GROUP_MIN_PAGE || fewBlocks || shared;
  const rangeFits = groupedKeys <= ROW_GROUP_MAX_KEYS;
  return splitsOfOne >= 2 && rows > 16 && pagesFit && rangeFits ? 2 : 1;
}

/**
 * Whether a launch of `splits` merges them in the split kernel (flash_decode_ws.cu, combine_in_split: the last
 * block of a key range to finish merges its splits' partial rows; no combine kernel runs): only where
 * decodeTuning.combine (`forced`) = 'fused'. Meant to save the combine's launch and its wait for the split
 * kernel's last block (~5% of a 1M-token K=1 call at two splits, benchmarks/results/h200/decode/2026-12-02-k1-loop-overheads §1), it
 * measured slower where the library runs 2–4 splits (benchmarks/results/h200/decode/2026-12-02-cache-length-row-groups, same run,
 * GB/s fused against the combine kernel: B=8 S=128k K=4, 4 splits, 4251 / 3809 / 4209 against 4341 / 4314 /
 * 4300 dense / block 16 / block 64; B=64 S=64k K=1, 2 splits, 4159 / 3818 / 4048 against 4328 / 4300 / 4261;
 * K=8 at 2 splits within 0.2%).
 */
export function tmaCombinesInSplit(splits: number, forced?: 'fused' | 'kernel'): boolean {
  if (forced !== undefined && forced !== 'fused' && forced !== 'kernel')
    throw new InvalidArgumentError('decodeTuning.combine', "'fused' or 'kernel'", String(forced));
  return splits > 1 && forced === 'fused';
}

/**
 * The cache bytes under which the default (ATTNLAB_DEPENDENT_LAUNCH unset) launches a split TMA call's two
 * kernels as programmatic dependents. Interleaved A/B, two processes each (benchmarks/results/h200/decode/2026-12-02-fixed-cost-dependent-launch,
 * H200, GB/s plain → both dependents): B=1 S=32k K=1, 32 splits, 16 MB, 841 / 796 / 834 → 912 / 846 /
 * 902 dense / block 16 / block 64 (+6–8%); B=64 S=16k K=1 block 16, two splits, 0.54 GB, 3795 → 3863 (+1.8%);
 * but B=64 S=64k K=1 (two splits, 2.1 GB) 4330 / 4284 / 4285 → 4293 / 4251 / 4266 and B=8 S=128k K=4 block 16
 * (four splits, 2.1 GB) 4303 → 4241 lose 0.4–1.4%. What it saves is the next launch's latency, a few µs a call;
 * what it costs grows with the call (~1–2%); on these rows the two cross near 1.2 GB, and the bound is 1 GiB.
 */
export const DEPENDENT_MAX_BYTES = 2 ** 30;

/**
 * Which of a TMA call's launches are programmatic dependents (launch-dependent.ts) for `choice`
 * (ATTNLAB_DEPENDENT_LAUNCH, config.ts): the split kernel (it waits for the work before it) and the combine
 * after it. 'auto' (unset): both where the keys are split (a combine follows; the kernel's own combine aside) and
 * the cache read is under DEPENDENT_MAX_BYTES; every launch ('all', =1) makes one-split calls back to back slower
 * (B=64 S=16k K=1 row groups 4134 → 3602 dense, 4026 → 3398 block 64; 146 against 125 µs a call),
 * so no other value makes a one-split call's kernel a dependent.
 */
export function tmaDependentLaunches(
  choice: DependentLaunchChoice,
  splits: number,
  combinesInSplit: boolean,
  cacheBytes: number,
): { readonly split: boolean; readonly combine: boolean } {
  const combined = splits > 1 && !combinesInSplit;
  switch (choice) {
    case 'off':
      return { split: false, combine: false };
    case 'all':
      return { split: true, combine: combined };
    case 'combine':
      return { split: false, combine: combined };
    case 'splits':
      return { split: combined, combine: combined };
    case 'auto': {
      const both = combined && cacheBytes < DEPENDENT_MAX_BYTES;
      return { split: both, combine: both };
    }
  }
}

export const tmaTileKeys = (v: DecodeTmaVariant) => v.slices * v.keysPerWarp;
export const tmaThreads = (v: DecodeTmaVariant) => (v.rowTiles * v.slices + 1) * 32;

/** Shared memory of one block, as WsConfig::SMEM with TMA (unpadded stages, 1024-byte aligned). */
export function tmaSharedBytes(v: DecodeTmaVariant): number {
  const keys = tmaTileKeys(v);
  const stage = keys * (v.headDim + v.valueHeadDim) * 2;
  const merge = v.rowTiles * v.slices * 16 * (v.valueHeadDim + 2) * 4;
  return 128 + 1024 + Math.max(v.stages * stage, merge);
}

export function tmaVariantKey(v: DecodeTmaVariant): string {
  const form = `${v.rowGroups > 1 ? `.r${v.rowGroups}` : ''}${v.multicast ? 'mc' : ''}${v.boxGroup ? `.g${v.boxGroup}` : ''}`;
  return `flash-decode-tma.${v.arch}.${v.fp16 ? 'f16' : 'bf16'}.d${v.headDim}.1x${v.rowTiles}x${v.slices}.k${tmaTileKeys(
    v,
  )}s${v.stages}${v.fast ? 'f' : ''}${form}`;
}

/** NVRTC defines of flash_decode_ws.cu's library entry for `v`. */
export function tmaDefines(v: DecodeTmaVariant): Record<string, number> {
  return {
    DECODE_FP16: v.fp16 ? 1 : 0,
    DECODE_WS_RTH: v.rowTiles,
    DECODE_WS_SLICES: v.slices,
    DECODE_WS_KPW: v.keysPerWarp,
    DECODE_STAGES: v.stages,
    DECODE_WS_FAST: v.fast ? 1 : 0,
    DECODE_WS_GROUP: v.boxGroup,
    DECODE_WS_ROWGROUPS: v.rowGroups,
    DECODE_WS_MULTICAST: v.multicast ? 1 : 0,
  };
}

/**
 * The K and V maps decode_tma.cuh reads (4-D, innermost first): head dim, token (S dense, blockSize
 * paged), kv head, sequence (dense) or pool block (paged), with the layouts' byte strides; boxes of
 * 64 columns × the tile's TK rows (dense) or min(blockSize, TK) rows (paged: a page's rows). Grouped
 * boxes (boxGroup > 0): 5-D, the head dim split into 64 columns × 2 halves (stride 128 B), box {64,
 * boxGroup, 2, 1, 1}. No L2 promotion: every byte is read once, and 256-byte promotion of the 128-byte
 * half rows read 3.61 TB/s where none read 3.80 (kernel alone, B=64 S=16k dense; 3.60 → 3.74 at block
 * 64, block 16 even).
 */
export function tmaMapSpecs(
  p: AttentionProblem,
  v: DecodeTmaVariant,
  k: bigint,
  val: bigint,
): TiledMapSpec[] {
  const tile = tmaTileKeys(v);
  const tokens = p.paged ? p.paged.blockSize : p.S;
  const outer = p.paged ? p.paged.numBlocks : p.B;
  const boxRows = p.paged ? Math.min(p.paged.blockSize, tile) : tile;
  const grouped = v.boxGroup > 0;
  const spec = (address: bigint, dim: number): TiledMapSpec => ({
    dtype: p.dtype === 'float16' ? 'float16' : 'bfloat16',
    address,
    dims: grouped ? [64, tokens, 2, p.K, outer] : [dim, tokens, p.K, outer],
    byteStrides: grouped
      ? [p.K * dim * 2, 128, dim * 2, tokens * p.K * dim * 2]
      : [p.K * dim * 2, dim * 2, tokens * p.K * dim * 2],
    box: grouped ? [64, v.boxGroup, 2, 1, 1] : [64, boxRows, 1, 1],
    l2Promotion: 'none',
  });
  return [spec(k, p.H), spec(val, p.Hv)];
}

interface KeptMaps {
  readonly k: bigint;
  readonly v: bigint;
  readonly signature: string;
  readonly bytes: readonly [Uint8Array, Uint8Array];
}
/** The maps of the last call on each key buffer: a decode loop asks for the same two every step. */
const kept = new WeakMap<object, KeptMaps>();

/**
 * The K and V maps of `p` for `v` as the kernel's two 128-byte arguments. Kept per key buffer and found
 * again by its address, the value's and what the maps depend on (tile, box group, sizes): building the specs and
 * cachedTiledMap's keys took ~2.7 µs of a ~17 µs B=1 call (fake driver), this lookup ~0.2.
 */
export function tmaMapBytes(p: AttentionProblem, v: DecodeTmaVariant): readonly [Uint8Array, Uint8Array] {
  const k = p.key.buffer.ptr;
  const val = p.value.buffer.ptr;
  const signature = `${p.dtype}:${p.K}:${p.H}:${p.Hv}:${p.S}:${p.B}:${p.paged?.blockSize}:${p.paged?.numBlocks}:${tmaTileKeys(v)}:${v.boxGroup}`;
  const last = kept.get(p.key.buffer);
  if (last && last.k === k && last.v === val && last.signature === signature) return last.bytes;
  const [kMap, vMap] = tmaMapSpecs(p, v, k, val).map((spec) => new Uint8Array(cachedTiledMap(spec).buffer));
  const bytes = [kMap, vMap] as const;
  kept.set(p.key.buffer, { k, v: val, signature, bytes });
  return bytes;
}
