/**
 * The flash backend's decoding path: split-KV kernels for few queries per sequence over a long cache
 * (dense, paged through a block table, or packed) and their combine kernel. Two launches per call at
 * most: the split, and the combine when splits > 1 (the TMA kernel can merge them itself where
 * decodeTuning.combine asks: decode-tma.ts, tmaCombinesInSplit). Three split kernels: the heads kernel
 * (flash_decode_heads.cu, decode-heads.ts: whole token rows of up to 8 kv heads a block) for long
 * caches where it runs and measured faster than the row-tile kernel; its TMA form (flash_decode_ws.cu,
 * decode-tma.ts: one kv head a block, a producer warp's tensor copies) in its place wherever that can run
 * (+2–6% at K=8, 1.20–1.32× at K=1) and on MQA-like caches from 32k tokens; and the
 * row-tile kernel (flash_decode.cu, below) for the rest.
 *
 * Which problems take the decode path: every paged or packed one (the prefill kernel has neither),
 * and dense ones whose rows per key/value head (T·N/K, GQA-packed into m16 tiles) fit in 4 tiles —
 * decoding and short speculative steps, where the prefill kernel's 128-row query tiles would be
 * mostly padding and its grid of B·N blocks too small to fill 132 SMs. In the row-tile kernel up to
 * 4 row tiles share one block (`rowTiles`), so each K/V byte is read once per kv head (MQA N=32 has
 * 2). Its K/V rows arrive by cp.async.bulk on stage mbarriers (decode_load.cuh; sm_90, rows of
 * 16-byte multiples) or by 16-byte cp.async elsewhere (decodeTuning.loader forces either); both
 * passed the decode GPU tests on the H200, and compute-sanitizer memcheck of benchmarks/harnesses/decode-kernel.cu's
 * nvcc build of the same kernel source (benchmarks/results/h200/decode/2026-12-01-row-tile-split-counts; the heads kernel:
 * 2026-12-01-heads-kernel-cudnn-paged). The split count comes from decode-splits.ts.
 */
import { config } from '../../../../config.js';
import { AttnlabError, InvalidArgumentError } from '../../../../errors.js';
import { sameInts } from '../../../../tensor/same-ints.js';
import type { DeviceBuffer } from '../../../../tensor/storage.js';
import { Tensor } from '../../../../tensor/tensor.js';
import { SUPPORTED, type Support, unsupported } from '../../../backend.js';
import {
  type AttentionProblem,
  type BackendOutput,
  cachedTokens,
  type ShapeFields,
  sameShapeFields,
  shapeFields,
} from '../../../problem.js';
import { loadKernels } from '../../runtime/compile.js';
import { currentDeviceOrdinal, getCudaContext, onDevice, targetArch } from '../../runtime/context.js';
import { int32OnDevice, int32OnDeviceUnchanging } from '../../runtime/int32-cache.js';
import { type KernelArg, launchKernel, ptr, type ScalarType, structLayout } from '../../runtime/launch.js';
import {
  beginLaunchGroup,
  endLaunchGroup,
  forgetLaunchGraph,
  GROUP_CAPTURING,
  GROUP_LAUNCHED,
  type LaunchGraph,
  newLaunchGraph,
} from '../../runtime/launch-graph.js';
import { mirroredLengths } from '../../runtime/lengths-mirror.js';
import { allocDevice, copyInt32IntoDevice, fillDevice32, growingDeviceBuffer } from '../../runtime/memory.js';
import { FLASH_FLAGS } from '../params.js';
import { archMajor, keyValueAligned } from './decode-common.js';
import {
  type DecodeHeadsVariant,
  HEADS_MIN_TOKENS,
  headsDefines,
  headsPreferred,
  headsSharedBytes,
  headsSupport,
  headsTileKeys,
  headsVariant,
  headsVariantKey,
} from './decode-heads.js';
import { chooseSplitCount, decodeTuning, MAX_SPLITS } from './decode-splits.js';
import {
  type DecodeTmaVariant,
  TMA_KERNEL,
  TMA_SHORT_MIN_TOKENS,
  tmaCombinesInSplit,
  tmaDefines,
  tmaDependentLaunches,
  tmaMapBytes,
  tmaMulticast,
  tmaPreferred,
  tmaPreferredShort,
  tmaRowGroups,
  tmaSharedBytes,
  tmaSupport,
  tmaThreads,
  tmaTileKeys,
  tmaVariant,
  tmaVariantKey,
} from './decode-tma.js';

/** Keys per tile and rows per block, as DEC_BN / DEC_ROWS in flash_decode.cu. */
const TILE_KEYS = 64;
const BLOCK_ROWS = 16;
/** Dense problems with at most this many GQA-packed rows per kv head take the decode kernel. */
const DENSE_DECODE_MAX_ROWS = 4 * BLOCK_ROWS;
const WINDOW_UNBOUNDED = 1 << 29;
const NEG_INF_BITS = 0xff800000;
/** sizeof(DecodeParams): 12 pointers + 8 strides (8 bytes), 16 four-byte fields. */
export const DECODE_PARAMS_BYTES = 12 * 8 + 8 * 8 + 16 * 4;

export interface DecodeVariant {
  readonly kind?: 'rows';
  readonly arch: string;
  readonly fp16: boolean;
  /** Q/K and V head dims padded to multiples of 16. */
  readonly headDim: number;
  readonly valueHeadDim: number;
  /** Stages of K+V tiles: 3 up to D=128 (2 blocks of ~110 KB per SM), 2 above. */
  readonly stages: number;
  /** m16 row tiles per block: 1, 2 or 4 (the kernel's RT); 1 above D=128, where registers run out. */
  readonly rowTiles: number;
  /** K/V rows by cp.async.bulk on an mbarrier (sm_90) rather than 16-byte cp.async. */
  readonly bulk: boolean;
}

const pad16 = (x: number) => Math.ceil(x / 16) * 16;

/** m16 tiles of GQA-packed (token, query head) rows per kv head. */
const rowTileCount = (p: AttentionProblem) => Math.ceil((p.T * p.N) / p.K / BLOCK_ROWS);

/** Whether the bulk loader can take `p`: sm_90+, rows of 16-byte multiples at 16-byte-aligned addresses. */
function bulkLoadable(p: AttentionProblem, arch: string): boolean {
  return archMajor(arch) >= 90 && p.H % 8 === 0 && p.Hv % 8 === 0 && keyValueAligned(p);
}

/**
 * The loader where both can run, by layout, as measured on the H200 (benchmarks/results/h200/decode/2026-12-01-row-tile-split-counts,
 * kernel alone, B·S = 1M, K=8): a paged cache reads 3.6 TB/s by bulk copies against 2.6 by cp.async
 * (the bulk loader loads each row's table entry a tile ahead; cp.async's addresses wait on it), a
 * dense or packed one 4.0 by cp.async against 3.9 by bulk copies. A "stall at the first
 * bulk launch" was NVRTC time, not the loader: the unrolled scalar P·V fallback made RT=4 take ~32 s
 * to compile (47k PTX lines; 6k now), and a test process inside that native call ignores SIGTERM.
 */
const defaultLoader = (p: AttentionProblem): 'bulk' | 'async' => (p.paged ? 'bulk' : 'async');

export function decodeVariant(p: AttentionProblem, arch: string): DecodeVariant {
  const headDim = pad16(p.H);
  const valueHeadDim = pad16(p.Hv);
  const wide = Math.max(headDim, valueHeadDim) > 128;
  const tiles = rowTileCount(p);
  return {
    arch,
    fp16: p.dtype === 'float16',
    headDim,
    valueHeadDim,
    stages: wide ? 2 : 3,
    rowTiles: wide || tiles <= 1 ? 1 : tiles <= 2 ? 2 : 4,
    bulk: (decodeTuning.loader ?? defaultLoader(p)) === 'bulk' && bulkLoadable(p, arch),
  };
}

export function decodeVariantKey(v: DecodeVariant): string {
  return `flash-decode.${v.arch}.${v.fp16 ? 'f16' : 'bf16'}.d${v.headDim}${
    v.valueHeadDim !== v.headDim ? `v${v.valueHeadDim}` : ''
  }.64x${16 * v.rowTiles}x4s${v.stages}.${v.bulk ? 'bulk' : 'async'}`;
}

/** Shared memory of one block, as DecodeConfig::SMEM. */
export function decodeSharedBytes(v: DecodeVariant): number {
  const barriers = 64;
  const q = BLOCK_ROWS * v.rowTiles * (v.headDim + 8) * 2;
  const stage = TILE_KEYS * (v.headDim + 8) * 2 + TILE_KEYS * (v.valueHeadDim + 8) * 2;
  const merge = 4 * BLOCK_ROWS * (v.valueHeadDim + 2) * 4;
  return barriers + q + Math.max(v.stages * stage, merge);
}

/** Whether the flash backend should run `p` through the decode kernel rather than the prefill one. */
export function wantsDecodeKernel(p: AttentionProblem): boolean {
  if (p.paged || p.packed) return true;
  return !p.bias && !p.mask && p.dtype !== 'float32' && (p.T * p.N) / p.K <= DENSE_DECODE_MAX_ROWS;
}

/** Why the decode kernel cannot run `p` (the flash backend's general checks have passed). */
export function decodeSupport(p: AttentionProblem): Support {
  const layout = p.paged ? 'a paged KV cache' : 'packed sequences';
  if (p.dtype !== 'bfloat16' && p.dtype !== 'float16') {
    return unsupported(`${layout} in ${p.dtype}: the decode kernel takes bfloat16 or float16`);
  }
  if (p.bias || p.mask) {
    return unsupported(
      `${layout} with a ${p.bias ? 'bias' : 'boolean mask'}: the decode kernel takes neither`,
    );
  }
  if (p.B * p.K > 65535) return unsupported(`B·K = ${p.B * p.K}: the grid's z dimension is at most 65535`);
  const v = decodeVariant(p, targetArch());
  const shared = decodeSharedBytes(v);
  const limit = getCudaContext().properties.maxSharedMemoryPerBlockOptin;
  if (shared > limit)
    return unsupported(`${decodeVariantKey(v)} needs ${shared} B of shared memory, ${limit} allowed`);
  return SUPPORTED;
}

/**
 * Splits of the key range (decode-splits.ts): the grid's waves over the blocks that fit at once,
 * `multiprocessors` × as many blocks of `v` as one's shared memory holds (228 KB on sm_90, taken as
 * the per-block opt-in limit + the 1 KB the driver reserves per block).
 */
export function chooseSplits(
  p: AttentionProblem,
  v: DecodeVariant | DecodeHeadsVariant | DecodeTmaVariant,
  multiprocessors: number,
  sharedLimit: number,
): number {
  if (decodeTuning.splits) {
    // The combine kernel keeps one weight per split in shared memory (DEC_MAX_SPLITS).
    if (!Number.isInteger(decodeTuning.splits) || decodeTuning.splits > MAX_SPLITS) {
      throw new InvalidArgumentError(
        'decodeTuning.splits',
        `an integer from 1 to ${MAX_SPLITS}`,
        String(decodeTuning.splits),
      );
    }
    return decodeTuning.splits;
  }
  const shared =
    v.kind === 'heads' ? headsSharedBytes(v) : v.kind === 'tma' ? tmaSharedBytes(v) : decodeSharedBytes(v);
  const perSm = Math.max(1, Math.floor((sharedLimit + 1024) / (shared + 1024)));
  const tileKeys = v.kind === 'heads' ? headsTileKeys(v) : v.kind === 'tma' ? tmaTileKeys(v) : TILE_KEYS;
  return chooseSplitCount({
    blocks:
      v.kind === 'heads'
        ? p.B * (p.K / v.heads)
        : v.kind === 'tma'
          ? p.B * p.K * v.rowGroups
          : p.B * p.K * Math.ceil(rowTileCount(p) / v.rowTiles),
    tiles: Math.max(1, Math.ceil(p.S / tileKeys)),
    slots: multiprocessors * perSm,
  });
}

/**
 * Whether `p` runs on the heads kernel (decode-heads.ts) rather than the row-tile kernel: where it
 * can and the measured rule prefers it (headsPreferred: long caches, B·S ≥ 128k tokens), unless
 * decodeTuning (`kernel`, or a `loader`, which only the row-tile kernel has) or
 * ATTNLAB_DECODE_KERNEL forces one.
 */
function runsOnHeads(p: AttentionProblem, arch: string): boolean {
  const forced = forcedKernel();
  if (forced === 'rows' || !headsSupport(p, arch).ok) return false;
  return forced === 'heads' || headsPreferred(p);
}
const forcedKernel = () =>
  decodeTuning.kernel ?? (decodeTuning.loader ? 'rows' : config().experimental.decodeKernel);

/**
 * The split kernel for `p`: the TMA kernel where forced and it can run; else, unless a kernel is forced,
 * where the heads kernel would run (tmaPreferred) or, on a short cache, the row-tile kernel with MQA-like
 * rows (tmaPreferredShort); else runsOnHeads' choice. The TMA kernel in row groups where its one-block form
 * would split the keys and a group's blocks read at most ROW_GROUP_MAX_KEYS each (tmaRowGroups).
 */
export function splitVariant(
  p: AttentionProblem,
  arch: string,
  sharedLimit: number,
  multiprocessors: number,
): DecodeVariant | DecodeHeadsVariant | DecodeTmaVariant {
  const forced = forcedKernel();
  const rowGroups = decodeTuning.rowGroups;
  if (rowGroups !== undefined && rowGroups !== 1 && rowGroups !== 2)
    throw new InvalidArgumentError('decodeTuning.rowGroups', '1 or 2', String(rowGroups));
  const rowTiles = decodeTuning.rowTiles;
  if (rowTiles !== undefined && rowTiles !== 1 && rowTiles !== 2)
    throw new InvalidArgumentError('decodeTuning.rowTiles', '1 or 2', String(rowTiles));
  const multicast = decodeTuning.multicast;
  if (multicast !== undefined && typeof multicast !== 'boolean')
    throw new InvalidArgumentError('decodeTuning.multicast', 'true or false', String(multicast));
  const tma = () => {
    const { boxGroup } = decodeTuning;
    const one = tmaVariant(p, arch, 1, { boxGroup, rowTiles });
    const grouped = tmaVariant(p, arch, 2, { boxGroup, multicast: tmaMulticast(p, multicast) });
    const splitsOfOne = chooseSplits(p, one, multiprocessors, sharedLimit);
    const groupedKeys = Math.ceil(p.S / chooseSplits(p, grouped, multiprocessors, sharedLimit));
    return tmaRowGroups(p, splitsOfOne, groupedKeys, multiprocessors, rowGroups, multicast) === 1
      ? one
      : grouped;
  };
  if (forced === 'tma' && tmaSupport(p, arch).ok) return tma();
  if (!runsOnHeads(p, arch)) return !forced && tmaPreferredShort(p, arch) ? tma() : decodeVariant(p, arch);
  return forced !== 'heads' && tmaPreferred(p, arch) ? tma() : headsVariant(p, arch, sharedLimit);
}

/** The split and combine kernels of a decode kernel file, specialised by `defines`. */
function loadDecode(file: string, split: string, defines: Record<string, number>) {
  const combine = 'attnlab_flash_decode_combine';
  const module = loadKernels({ file, kernels: [split, combine], defines });
  return { split: module.functions.get(split)!, combine: module.functions.get(combine)! };
}

const headsKernels = (v: DecodeHeadsVariant) =>
  loadDecode('decode/flash_decode_heads.cu', 'attnlab_flash_decode_heads', headsDefines(v));
const tmaKernels = (v: DecodeTmaVariant) =>
  loadDecode('decode/flash_decode_ws.cu', TMA_KERNEL, tmaDefines(v));

const kernels = (v: DecodeVariant) =>
  loadDecode('decode/flash_decode.cu', 'attnlab_flash_decode', {
    DECODE_D: v.headDim,
    DECODE_DV: v.valueHeadDim,
    DECODE_FP16: v.fp16 ? 1 : 0,
    DECODE_STAGES: v.stages,
    DECODE_RT: v.rowTiles,
    DECODE_BULK: v.bulk ? 1 : 0,
  });

/**
 * The TMA kernel's split counters (flash_decode_ws.cu, combine_in_split), one int per (sequence, kv head, row
 * group) of a launch: zeroed once when made, and left zero by every launch (the last block of each key range
 * resets its counter), so calls share them in stream order with no memset of their own.
 */
const splitCounters = growingDeviceBuffer((made) => fillDevice32(made, 0));

/**
 * What a decode call of one shape works out before its buffers exist: the split kernel's variant, the
 * split count, the kernels, the label results report and DecodeParams with every field but the twelve
 * pointers written. Made once per shape (decodePlan) and kept: working it out costs ~5 KB of
 * allocations and several µs of a B=1 step's host time.
 */
interface DecodePlan {
  readonly variant: DecodeVariant | DecodeHeadsVariant | DecodeTmaVariant;
  readonly splits: number;
  /** The TMA kernel merges the splits itself (no combine launch). */
  readonly inSplit: boolean;
  /** The variant string results report. */
  readonly label: string;
  /** DecodeParams as bytes, pointers left for each call (DECODE_LAYOUT.offsets[0 … 11]). */
  readonly params: Uint8Array;
  readonly view: DataView;
  /** The split and combine kernels, loaded at the first launch (a call with no rows loads none). */
  fn: { readonly split: bigint; readonly combine: bigint } | null;
  /** The plain (not TMA) launches as one CUDA graph once their parameters repeat (runtime/launch-graph.ts). */
  readonly graph: LaunchGraph;
  /** The cached lengths on the device (keptLengths), made at the first call with lengths. */
  lengths: { readonly buffer: DeviceBuffer; readonly values: Int32Array } | null;
}

function makeDecodePlan(p: AttentionProblem): DecodePlan {
  const { B, T, N, K, H, Hv } = p;
  const queryOffsets = p.packed?.querySeqOffsets ?? null;
  const tokens = queryOffsets ? queryOffsets[B] : B * T;
  const rows = tokens * N;
  const arch = targetArch();
  const { properties } = getCudaContext();
  const sharedLimit = properties.maxSharedMemoryPerBlockOptin;
  const variant = splitVariant(p, arch, sharedLimit, properties.multiprocessorCount);
  const heads = variant.kind === 'heads' ? variant : null;
  const tma = variant.kind === 'tma' ? variant : null;
  const key = heads
    ? headsVariantKey(heads)
    : tma
      ? tmaVariantKey(tma)
      : decodeVariantKey(variant as DecodeVariant);
  const splits = chooseSplits(p, variant, properties.multiprocessorCount, sharedLimit);
  // The TMA kernel's last block of each key range merges the splits itself where decodeTuning.combine asks.
  const inSplit = tma !== null && tmaCombinesInSplit(splits, decodeTuning.combine);
  let flags = 0;
  if (p.causal) flags |= FLASH_FLAGS.causal;
  if (p.alignment === 'bottom_right') flags |= FLASH_FLAGS.bottomRight;
  if (p.window) flags |= FLASH_FLAGS.window;
  const side = (x: number) => (Number.isFinite(x) ? Math.min(x, WINDOW_UNBOUNDED) : WINDOW_UNBOUNDED);
  const params = marshalDecodeParams({
    pointers: Array<bigint>(12).fill(0n),
    // Token and head strides in elements: every layout is token-major with heads inside.
    strides: [N * H, H, K * H, H, K * Hv, Hv, N * Hv, Hv],
    ints: [
      B,
      T,
      p.S,
      N,
      K,
      H,
      Hv,
      N / K,
      p.paged?.blockSize ?? 0,
      p.paged?.maxBlocksPerSeq ?? 0,
      splits,
      p.window ? side(p.window.left) : WINDOW_UNBOUNDED,
      p.window ? side(p.window.right) : WINDOW_UNBOUNDED,
    ],
    scaleLog2: p.scale * Math.LOG2E,
    flags,
    rowsTotal: rows,
  });
  if (params.type !== 'bytes') throw new AttnlabError('DecodeParams: marshalled as bytes');
  return {
    variant,
    splits,
    inSplit,
    label: `${key}.split${splits}${inSplit ? '.fused' : ''}${p.paged ? `.paged${p.paged.blockSize}` : ''}${p.packed ? '.packed' : ''}`,
    params: params.bytes,
    view: new DataView(params.bytes.buffer, params.bytes.byteOffset, params.bytes.byteLength),
    fn: null,
    graph: newLaunchGraph(),
    lengths: null,
  };
}

/** Everything of a dense or paged problem (not packed) that reaches makeDecodePlan, and the settings. */
interface DecodeFields {
  readonly device: number;
  readonly shape: ShapeFields;
  /** A paged cache's block size and blocks per sequence (−1 for a dense one). */
  readonly paged: readonly [number, number];
  readonly qLens: boolean;
  readonly kvLens: boolean;
  /** Which side of the kernel rules' cached-token thresholds (headsPreferred, tmaPreferredShort) it is on. */
  readonly tokens: number;
  readonly settings: unknown;
  /** decodeTuning's fields when the plan was made (a bench or test sets them in place). */
  readonly tuning: readonly unknown[];
}

/**
 * The kernel rules read the cached tokens (a paged cache's lengths change every step) only against these
 * thresholds: 0 below TMA_SHORT_MIN_TOKENS, 1 below HEADS_MIN_TOKENS, 2 from it.
 */
function tokenClass(p: AttentionProblem): number {
  const tokens = cachedTokens(p);
  return tokens >= HEADS_MIN_TOKENS ? 2 : tokens >= TMA_SHORT_MIN_TOKENS ? 1 : 0;
}

const tuningFields = (): unknown[] => [
  decodeTuning.splits,
  decodeTuning.loader,
  decodeTuning.kernel,
  decodeTuning.rowGroups,
  decodeTuning.rowTiles,
  decodeTuning.multicast,
  decodeTuning.boxGroup,
  decodeTuning.combine,
];

function decodeFields(p: AttentionProblem, device: number): DecodeFields {
  return {
    device,
    shape: shapeFields(p),
    paged: [p.paged ? p.paged.blockSize : -1, p.paged ? p.paged.maxBlocksPerSeq : -1],
    qLens: p.querySeqLengths !== null,
    kvLens: p.keyValueSeqLengths !== null,
    tokens: tokenClass(p),
    settings: config(),
    tuning: tuningFields(),
  };
}

function sameDecodeFields(f: DecodeFields, p: AttentionProblem, device: number): boolean {
  const t = f.tuning;
  return (
    f.device === device &&
    sameShapeFields(f.shape, p) &&
    f.paged[0] === (p.paged ? p.paged.blockSize : -1) &&
    f.paged[1] === (p.paged ? p.paged.maxBlocksPerSeq : -1) &&
    f.qLens === (p.querySeqLengths !== null) &&
    f.kvLens === (p.keyValueSeqLengths !== null) &&
    f.tokens === tokenClass(p) &&
    f.settings === config() &&
    t[0] === decodeTuning.splits &&
    t[1] === decodeTuning.loader &&
    t[2] === decodeTuning.kernel &&
    t[3] === decodeTuning.rowGroups &&
    t[4] === decodeTuning.rowTiles &&
    t[5] === decodeTuning.multicast &&
    t[6] === decodeTuning.boxGroup &&
    t[7] === decodeTuning.combine
  );
}

/** The plans of the last few shapes, most recent first (a decode loop has one; a paged cache's grows a block at a time). */
const decodePlans: Array<{ readonly fields: DecodeFields; readonly plan: DecodePlan }> = [];
const DECODE_PLANS = 8;

/** The plan of `p`: kept per shape for dense and paged problems, made for each packed one (its rows come from offsets). */
function decodePlan(p: AttentionProblem): DecodePlan {
  if (p.packed) return makeDecodePlan(p);
  const device = currentDeviceOrdinal();
  for (let i = 0; i < decodePlans.length; i++)
    if (sameDecodeFields(decodePlans[i].fields, p, device)) return decodePlans[i].plan;
  const plan = makeDecodePlan(p);
  decodePlans.unshift({ fields: decodeFields(p, device), plan });
  if (decodePlans.length > DECODE_PLANS) {
    const dropped = decodePlans.pop()!;
    onDevice(dropped.fields.device, () => {
      forgetLaunchGraph(dropped.plan.graph);
      dropped.plan.lengths?.buffer.release();
    });
  }
  return plan;
}

function decodeKernels(variant: DecodePlan['variant']) {
  if (variant.kind === 'heads') return headsKernels(variant);
  if (variant.kind === 'tma') return tmaKernels(variant);
  return kernels(variant);
}

export function runDecode(p: AttentionProblem): BackendOutput {
  const { B, T, N, K, H, Hv } = p;
  const queryOffsets = p.packed?.querySeqOffsets ?? null;
  const kvOffsets = p.packed?.keyValueSeqOffsets ?? null;
  const tokens = queryOffsets ? queryOffsets[B] : B * T;
  const rows = tokens * N;
  const plan = decodePlan(p);
  const { variant, splits, inSplit } = plan;
  const tma = variant.kind === 'tma' ? variant : null;
  const itemBytes = 2;
  const out = allocDevice(rows * Hv * itemBytes);
  const lse = p.returnLogSumExp ? allocDevice(rows * 4) : null;
  // A dense query with lengths has padding rows no block writes: they must read zeros (lse −inf).
  if (!queryOffsets && p.querySeqLengths) {
    fillDevice32(out, 0);
    if (lse) fillDevice32(lse, NEG_INF_BITS);
  }
  // Kept on the device across calls and found again by content (int32-cache.ts): not released here.
  // The block table is validation's own copy, never changed (api/kv-layout.ts): the same array, the same upload.
  const table = p.paged ? int32OnDeviceUnchanging(p.paged.blockTable) : null;
  const qOffsets = upload(queryOffsets);
  const kvOffs = upload(kvOffsets);
  const qLens = upload(queryOffsets ? null : p.querySeqLengths);
  // A KVCache step's lengths were written with its append's slots (runtime/lengths-mirror.ts): read there.
  const kvLens =
    kvOffsets || !p.keyValueSeqLengths
      ? null
      : (mirroredLengths(p.keyValueSeqLengths) ?? keptLengths(plan, p.keyValueSeqLengths));
  const counters = tma && inSplit ? splitCounters(B * K * tma.rowGroups * 4) : null;
  const dependent = tma
    ? tmaDependentLaunches(
        config().experimental.dependentLaunch,
        splits,
        inSplit,
        cachedTokens(p) * K * (H + Hv) * itemBytes,
      )
    : { split: false, combine: false };
  const partO = splits > 1 ? allocDevice(splits * rows * variant.valueHeadDim * 4) : null;
  const partLse = splits > 1 ? allocDevice(splits * rows * 4) : null;
  try {
    if (rows > 0) {
      plan.fn ??= decodeKernels(variant);
      const fn = plan.fn;
      const { view } = plan;
      const at = DECODE_LAYOUT.offsets;
      view.setBigUint64(at[0], p.query.buffer.ptr, true);
      view.setBigUint64(at[1], p.key.buffer.ptr, true);
      view.setBigUint64(at[2], p.value.buffer.ptr, true);
      view.setBigUint64(at[3], out.ptr, true);
      view.setBigUint64(at[4], lse?.ptr ?? 0n, true);
      view.setBigUint64(at[5], partO?.ptr ?? 0n, true);
      view.setBigUint64(at[6], partLse?.ptr ?? 0n, true);
      view.setBigUint64(at[7], table?.ptr ?? 0n, true);
      view.setBigUint64(at[8], qOffsets?.ptr ?? 0n, true);
      view.setBigUint64(at[9], kvOffs?.ptr ?? 0n, true);
      view.setBigUint64(at[10], qLens?.ptr ?? 0n, true);
      view.setBigUint64(at[11], kvLens?.ptr ?? 0n, true);
      // One bytes argument for both launches: launchKernel copies it before each returns.
      const params: KernelArg = { type: 'bytes', bytes: plan.params };
      if (tma) {
        // The K and V tensor maps follow DecodeParams as two more 128-byte arguments (decode_tma.cuh). A
        // programmatic dependent where tmaDependentLaunches says (launch-dependent.ts): the kernel waits
        // (griddepcontrol.wait) before it reads memory, and lets its combine start as its last blocks finish.
        const [kMap, vMap] = tmaMapBytes(p, tma);
        const grid: [number, number, number] = [splits * tma.rowGroups, K, B];
        launchKernel(
          fn.split,
          {
            grid,
            block: [tmaThreads(tma), 1, 1],
            sharedBytes: tmaSharedBytes(tma),
            dependent: dependent.split,
          },
          [params, { type: 'bytes', bytes: kMap }, { type: 'bytes', bytes: vMap }, ptr(counters?.ptr ?? 0n)],
        );
      } else {
        // Everything these launches read that changes between calls is in DecodeParams (the grid and shared
        // memory are the plan's): its bytes are the graph's signature.
        const step = beginLaunchGroup(plan.graph, plan.params);
        if (step !== GROUP_LAUNCHED) {
          let launched = false;
          try {
            launchPlainDecode(p, plan, rows);
            launched = true;
          } finally {
            // A capture the driver refused ran nothing: the launches again, plainly.
            if (step === GROUP_CAPTURING && !endLaunchGroup(plan.graph, plan.params, launched) && launched)
              launchPlainDecode(p, plan, rows);
          }
        }
      }
      if (tma && splits > 1 && !inSplit) {
        // The combine waits for its split kernel's writes (griddepcontrol.wait) wherever it runs (a no-op in a
        // plain launch); a dependent where tmaDependentLaunches says, after the TMA kernel that lets it start early.
        launchKernel(
          fn.combine,
          {
            grid: [Math.ceil(rows / 4), 1, 1],
            block: [128, 1, 1],
            dependent: dependent.combine,
          },
          [params],
        );
      }
    }
  } finally {
    // The pool hands these blocks only to work enqueued later on the same stream.
    for (const buffer of [partO, partLse]) buffer?.release();
  }
  const shape = queryOffsets ? [tokens, N, Hv] : [B, T, N, Hv];
  return {
    output: Tensor.fromDeviceBuffer(out, shape, p.dtype),
    logSumExp: lse ? Tensor.fromDeviceBuffer(lse, shape.slice(0, -1), 'float32') : undefined,
    variant: plan.label,
  };
}

/** The split kernel (row-tile or heads) and the combine of a plan that is not the TMA kernel's. */
function launchPlainDecode(p: AttentionProblem, plan: DecodePlan, rows: number): void {
  const { B, K } = p;
  const { variant, splits, inSplit } = plan;
  const fn = plan.fn!;
  const params: KernelArg = { type: 'bytes', bytes: plan.params };
  if (variant.kind === 'heads') {
    launchKernel(
      fn.split,
      { grid: [splits, K / variant.heads, B], block: [256, 1, 1], sharedBytes: headsSharedBytes(variant) },
      [params],
    );
  } else {
    const rowVariant = variant as DecodeVariant;
    const rowGroups = Math.ceil(rowTileCount(p) / rowVariant.rowTiles);
    launchKernel(
      fn.split,
      { grid: [splits, rowGroups, B * K], block: [128, 1, 1], sharedBytes: decodeSharedBytes(rowVariant) },
      [params],
    );
  }
  if (splits > 1 && !inSplit)
    launchKernel(fn.combine, { grid: [Math.ceil(rows / 4), 1, 1], block: [128, 1, 1] }, [params]);
}

/**
 * The plan's device copy of the cached lengths: one buffer, rewritten on the stream when they change (a
 * KVCache step's grow by one), so that its pointer — and with it the launches' signature — stays the same
 * from step to step and the step's launches run as one graph. A plan made for each call (packed) uploads
 * by content instead (int32-cache.ts).
 */
function keptLengths(plan: DecodePlan, values: Int32Array): DeviceBuffer {
  const kept = plan.lengths;
  if (kept !== null && kept.values.length === values.length) {
    if (!sameInts(kept.values, values)) {
      copyInt32IntoDevice(kept.buffer, values);
      kept.values.set(values);
    }
    return kept.buffer;
  }
  kept?.buffer.release();
  const buffer = allocDevice(values.byteLength);
  copyInt32IntoDevice(buffer, values);
  plan.lengths = { buffer, values: values.slice() };
  return buffer;
}

/** Ints kept on the device (int32-cache.ts), or null. A function of the module: a closure a call costs a defineProperty under tsx. */
function upload(values: Int32Array | null) {
  return values ? int32OnDevice(values) : null;
}

interface DecodeParamValues {
  readonly pointers: readonly bigint[];
  readonly strides: readonly number[];
  readonly ints: readonly number[];
  readonly scaleLog2: number;
  readonly flags: number;
  readonly rowsTotal: number;
}

/** DecodeParams' scalar types in declaration order (decode_common.cuh). */
export const DECODE_PARAM_TYPES: readonly ScalarType[] = [
  ...Array<ScalarType>(12).fill('ptr'),
  ...Array<ScalarType>(8).fill('i64'),
  ...Array<ScalarType>(13).fill('i32'),
  'f32',
  'i32',
  'i32',
];
/** Laid out once, by C's rules as launchKernel lays out a 'struct' argument. */
const DECODE_LAYOUT = structLayout(DECODE_PARAM_TYPES.map((type) => ({ type })));

/**
 * DecodeParams field for field, in declaration order, as bytes written at offsets laid out once; both
 * launches of a call (split and combine) copy them as they are. The 'struct' argument this replaced
 * built 36 field objects per call and laid them out and wrote them field by field again in each
 * launch: ~2.9 µs of host time per call against ~0.6 µs now (benchmarks/harnesses/decode-host-steps.ts, on the CPU),
 * out of the ~24 µs a B=1 call spends above its kernels (benchmarks/results/h200/decode/2026-12-01-heads-kernel-cudnn-paged).
 */
export function marshalDecodeParams(f: DecodeParamValues): KernelArg {
  const { offsets, size } = DECODE_LAYOUT;
  if (
    f.pointers.length !== 12 ||
    f.strides.length !== 8 ||
    f.ints.length !== 13 ||
    size !== DECODE_PARAMS_BYTES
  ) {
    throw new AttnlabError(
      `DecodeParams: ${f.pointers.length} pointers, ${f.strides.length} strides, ${f.ints.length} + 3 four-byte fields in ${size} bytes; the kernel expects 12, 8, 13 + 3 in ${DECODE_PARAMS_BYTES}`,
    );
  }
  const bytes = new Uint8Array(size);
  const view = new DataView(bytes.buffer);
  let i = 0;
  for (const value of f.pointers) view.setBigUint64(offsets[i++], value, true);
  for (const value of f.strides) view.setBigInt64(offsets[i++], BigInt(value), true);
  for (const value of f.ints) view.setInt32(offsets[i++], value, true);
  view.setFloat32(offsets[i++], f.scaleLog2, true);
  view.setInt32(offsets[i++], f.flags, true);
  view.setInt32(offsets[i], f.rowsTotal, true);
  return { type: 'bytes', bytes };
}
