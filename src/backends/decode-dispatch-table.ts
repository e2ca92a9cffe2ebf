/**
 * The measured order for decode steps with `implementation` unset — on a paged cache cuDNN's paged
 * attention or the flash decode kernels, on a dense cache (B, S, K, H) cuDNN's fused SDPA or the
 * flash decode kernels — from the recorded decode benchmarks of this GPU, as dispatch-table.ts
 * does for dense prefill. Each number is transcribed from a results file of the record (its
 * `sources`; scripts/dispatch-tables.ts reads them, and test/unit/backends/dispatch-table.test.ts
 * checks the table against the files).
 *
 * A case speaks only for a decode step like the one measured: the same architecture (the nearest
 * recorded GPU, device-dispatch-table.ts; a calibrated entry comes first), bf16, H = Hv, N, K and
 * layout (dense, or paged with the same block size), one new token (causal bottom-right or not: at T = 1 the bound drops nothing), no bias,
 * mask or window, a cache of about the measured size (cached tokens within a factor of 2 of the
 * case's B·S; of several, the case nearest in B), and for a paged cache a block table with room to
 * grow (tableHasRoom: cuDNN builds a graph per table width). Every other paged or packed problem runs
 * on the flash decode kernels (registry.ts), which were measured everywhere they run; every other
 * dense one follows the registry's order (cudnn first).
 *
 * What the numbers are: GB/s of K/V read once + Q + O, `timing` saying how each was taken — the
 * kernels alone (benchmarks/harnesses/decode-kernel.cu, CUDA events around the launches) or a library call
 * (benchmarks/harnesses/decode-bandwidth.ts, events around attention(), host work included). Where flash is
 * timed as kernels and still slower than cuDNN's library call, its library call is slower still.
 */
import { type DeviceClass, type DeviceMatch, nearestTables } from './device-dispatch-table.js';
import { type AttentionProblem, cachedTokens, type Implementation } from './problem.js';

export interface MeasuredDecodeCase {
  readonly B: number;
  readonly S: number;
  readonly N: number;
  readonly K: number;
  readonly H: number;
  /** 'dense' (key/value (B, S, K, H)) or 'paged<block size>' (pools through a block table). */
  readonly layout: string;
  /** GB/s of each backend. */
  readonly gbs: Partial<Record<Implementation, number>>;
  /** How each backend's number was timed, the file it is in, and (kernels) the harness's variant name. */
  readonly timing: Partial<Record<Implementation, DecodeTiming>>;
}

export interface DecodeTiming {
  readonly kind: 'kernel' | 'library';
  readonly source: string;
  readonly kernel?: string;
}

export interface DecodeDispatchTable {
  /** The GPU of the record as dispatch keys it (the cited files' `machine`): it applies to its architecture. */
  readonly device: DeviceClass;
  readonly dtype: 'bfloat16';
  readonly cases: readonly MeasuredDecodeCase[];
}

const LIBRARY_CALLS = 'benchmarks/results/h200/decode/2026-12-01-persistent-kernel-library-calls';
// Library calls (benchmarks/harnesses/decode-bandwidth.ts --table-room: block tables with one spare column, the
// tables this table speaks for), flash, cudnn and PyTorch in one run.
const libraryCalls = { kind: 'library', source: `${LIBRARY_CALLS}/run2-library.json` } as const;
// At e1910a3: flash with the TMA decode kernel at K=8, 4 and 1 from 128k cached tokens and at B=1 S=32k K=1,
// cudnn and PyTorch in one run, each row 20 library calls between a pair of events.
const TMA_EVERY_K = 'benchmarks/results/h200/decode/2026-12-02-tma-kernel-every-k';
const tmaEveryK = { kind: 'library', source: `${TMA_EVERY_K}/run3-big.json` } as const;
const tmaEveryKSmall = { kind: 'library', source: `${TMA_EVERY_K}/run3-small.json` } as const;
// At 4d32aac: flash's TMA kernel with one row tile at K=8 and 4 (decode-tma.ts, oneBlockRowTiles), cuDNN
// and PyTorch in one run, tables with room, 20 library calls between a pair of events.
const oneRowTile = {
  kind: 'library',
  source: 'benchmarks/results/h200/decode/2026-12-02-1m-tokens-k8-k4/run2-table.json',
} as const;
// At 2babb36: the block-16 rows again, the one-tile form reading a 16-row page a box (+1.1–2.4% over groups of 8).
const oneRowTilePages16 = {
  kind: 'library',
  source: 'benchmarks/results/h200/decode/2026-12-02-1m-tokens-k8-k4/run4-table16.json',
} as const;

/** A measured decode step of N=32, H=128: [GB/s, how it was timed] of flash and of cudnn. */
function step(
  B: number,
  S: number,
  K: number,
  layout: string,
  flash: [number, DecodeTiming],
  cudnn: [number, DecodeTiming],
): MeasuredDecodeCase {
  return {
    B,
    S,
    N: 32,
    K,
    H: 128,
    layout,
    gbs: { flash: flash[0], cudnn: cudnn[0] },
    timing: { flash: flash[1], cudnn: cudnn[1] },
  };
}

/**
 * The H200 (cuDNN 9.19.0: dense on the unified graph, engine 8, paged on the composite graph, engine 1,
 * both its sm80 wmma kernel). From 128k cached tokens at K=8 and 4 (flash on its TMA kernel with one row
 * tile), dense and block 64 (oneRowTile): cuDNN first by 0.04–2.0% but for B=8 S=128k dense K=8 (flash
 * 4597 against 4584) and block 64 (4538 / 4500 against 4480 / 4413 at K=8 / 4); block 16 (oneRowTilePages16), a 16-row
 * page a box: flash first at K=8 (4476–4529 against 4456–4475) and at B=8 S=128k K=4 (4444 against 4421),
 * cuDNN by 0.1–0.4% at B=64 and 128 K=4. Those two GPUs never reached their 700 W cap in the runs (SM clock
 * 1980 MHz throughout); a third H200, capped in 8–82% of its samples, had flash first on paged K=4 even with
 * groups of 8 (4301 / 4355 against 4192 / 4263 at B=64, 4265 / 4315 against 4084 / 4236 at B=128, blocks 16 /
 * 64): where the two are that close the order is the GPU's, and the table keeps the runs with tables with room.
 * At K=1 (tmaEveryK): flash on every MQA cache (dense 3.98–4.09 against 2.66–3.80, paged 3.77–3.99 against
 * 2.41–3.16). With two row tiles flash read 4.08–4.44 dense and 3.73–4.40 paged at K=8 and 4, second but for
 * one tie (benchmarks/results/h200/decode/2026-12-02-tma-kernel-every-k). At B=1 S=32k K=1 cuDNN is first (832 / 479 / 483 GB/s against flash's
 * row groups 664 / 407 / 424; the host sets both, ~25–45 µs a call). At
 * B=1 K=8 (libraryCalls): flash on paged caches (S=2k: 0.21 vs 0.16, S=32k: 2.35–2.50 vs 1.81–2.15), cuDNN on
 * the dense one at S=32k (3.27 vs 2.74). Not recorded: dense B=1 S=2k, where the two are within the run's
 * noise (flash 276 GB/s, cudnn 265 and 307 in two rows of the same run, `LIBRARY_CALLS`): the registry's order
 * (cudnn first) stays.
 */
export const H200_DECODE: DecodeDispatchTable = {
  device: {
    gpu: 'NVIDIA H200',
    computeCapability: '9.0',
    multiprocessors: null,
    memoryBandwidthGBs: null,
    cudnn: '9.19.0',
  },
  dtype: 'bfloat16',
  cases: [
    step(64, 16384, 8, 'dense', [4516, oneRowTile], [4565, oneRowTile]),
    step(8, 131072, 8, 'dense', [4597, oneRowTile], [4584, oneRowTile]),
    step(128, 8192, 8, 'dense', [4534, oneRowTile], [4562, oneRowTile]),
    step(64, 16384, 8, 'paged16', [4508, oneRowTilePages16], [4456, oneRowTilePages16]),
    step(8, 131072, 8, 'paged16', [4529, oneRowTilePages16], [4475, oneRowTilePages16]),
    step(128, 8192, 8, 'paged16', [4476, oneRowTilePages16], [4473, oneRowTilePages16]),
    step(64, 16384, 8, 'paged64', [4492, oneRowTile], [4531, oneRowTile]),
    step(8, 131072, 8, 'paged64', [4538, oneRowTile], [4480, oneRowTile]),
    step(128, 8192, 8, 'paged64', [4508, oneRowTile], [4570, oneRowTile]),
    step(64, 16384, 4, 'dense', [4541, oneRowTile], [4614, oneRowTile]),
    step(8, 131072, 4, 'dense', [4523, oneRowTile], [4564, oneRowTile]),
    step(128, 8192, 4, 'dense', [4470, oneRowTile], [4561, oneRowTile]),
    step(64, 16384, 4, 'paged16', [4403, oneRowTilePages16], [4420, oneRowTilePages16]),
    step(8, 131072, 4, 'paged16', [4444, oneRowTilePages16], [4421, oneRowTilePages16]),
    step(128, 8192, 4, 'paged16', [4399, oneRowTilePages16], [4405, oneRowTilePages16]),
    step(64, 16384, 4, 'paged64', [4484, oneRowTile], [4486, oneRowTile]),
    step(8, 131072, 4, 'paged64', [4500, oneRowTile], [4413, oneRowTile]),
    step(128, 8192, 4, 'paged64', [4443, oneRowTile], [4482, oneRowTile]),
    step(64, 16384, 1, 'dense', [4086, tmaEveryK], [3325, tmaEveryK]),
    step(8, 131072, 1, 'dense', [3982, tmaEveryK], [2656, tmaEveryK]),
    step(128, 8192, 1, 'dense', [4069, tmaEveryK], [3800, tmaEveryK]),
    step(64, 16384, 1, 'paged16', [3824, tmaEveryK], [2413, tmaEveryK]),
    step(8, 131072, 1, 'paged16', [3770, tmaEveryK], [2579, tmaEveryK]),
    step(128, 8192, 1, 'paged16', [3922, tmaEveryK], [3125, tmaEveryK]),
    step(64, 16384, 1, 'paged64', [3986, tmaEveryK], [2424, tmaEveryK]),
    step(8, 131072, 1, 'paged64', [3864, tmaEveryK], [2578, tmaEveryK]),
    step(128, 8192, 1, 'paged64', [3965, tmaEveryK], [3163, tmaEveryK]),
    step(1, 32768, 1, 'dense', [664, tmaEveryKSmall], [832, tmaEveryKSmall]),
    step(1, 32768, 1, 'paged16', [407, tmaEveryKSmall], [479, tmaEveryKSmall]),
    step(1, 32768, 1, 'paged64', [424, tmaEveryKSmall], [483, tmaEveryKSmall]),
    step(1, 32768, 8, 'dense', [2744, libraryCalls], [3268, libraryCalls]),
    step(1, 2048, 8, 'paged16', [213, libraryCalls], [159, libraryCalls]),
    step(1, 2048, 8, 'paged64', [198, libraryCalls], [149, libraryCalls]),
    step(1, 32768, 8, 'paged16', [2351, libraryCalls], [1808, libraryCalls]),
    step(1, 32768, 8, 'paged64', [2497, libraryCalls], [2153, libraryCalls]),
  ],
};

export const DECODE_DISPATCH_TABLES: readonly DecodeDispatchTable[] = [H200_DECODE];

export interface MeasuredDecodeOrder {
  /** Backend names, fastest first. */
  readonly order: readonly Implementation[];
  readonly table: DecodeDispatchTable;
  readonly measured: MeasuredDecodeCase;
  /** How near the table's GPU is to this one (device-dispatch-table.ts). */
  readonly match: DeviceMatch;
  /** Whether the order is the record's changed by BANDWIDTH_TRANSFER (another GPU of the architecture). */
  readonly transferred: boolean;
}

/**
 * How a decode record carries to a GPU of its architecture but not of its bandwidth class: a decode
 * step is bound by memory bandwidth, and flash's decode kernels read at the copy ceiling on both Hopper
 * parts measured (H200 4.5 TB/s; H100 2.9–3.1 TB/s of its 3.0 copy rate, issue #45), cuDNN's only on
 * the H200 (H100: 1.80–1.86 TB/s at B=64 S=16k K=1 and B=8 S=128k K=8). So where the record has flash
 * within 2% of cuDNN, flash goes first on the other GPU; where cuDNN led by more (B=1 S=32k: 19–25%),
 * the record's order stands. `attnlab tune` measures the GPU itself.
 */
export const BANDWIDTH_TRANSFER = 'flash first on another bandwidth class where the record has it within 2%';
const TRANSFER_MARGIN = 0.02;

/**
 * Whether the next decode steps keep `p`'s cuDNN graph: a block table with room for one more block
 * for its longest sequence. A tight table (KVCache's is) widens every blockSize tokens, and each
 * width is a new cuDNN graph, 0.27–2.9 s to build on the H200 against the
 * ~0.05 ms per step cuDNN saves at 1M tokens (4.40 vs 4.20 TB/s): there the flash kernels, which
 * need no build, are the faster choice for a growing cache. (The measured calls repeated one fixed
 * table; whether cuDNN's time grows with unused table width was not measured.)
 */
export function tableHasRoom(p: AttentionProblem): boolean {
  if (!p.paged || !p.keyValueSeqLengths) return false;
  const longest = p.keyValueSeqLengths.reduce((a, l) => Math.max(a, l), 0);
  return p.paged.maxBlocksPerSeq * p.paged.blockSize >= longest + p.paged.blockSize;
}

/** Whether `p` is a decode step a measured case can speak for (the header's conditions but size). */
function isMeasurableStep(p: AttentionProblem): boolean {
  const plainMask = !p.causal || p.alignment === 'bottom_right';
  return (
    !p.packed &&
    p.T === 1 &&
    plainMask &&
    !p.bias &&
    !p.mask &&
    !p.window &&
    p.H === p.Hv &&
    (!p.paged || (p.keyValueSeqLengths !== null && tableHasRoom(p)))
  );
}

/** The layout name a case records for `p`: 'dense' or 'paged<block size>'. */
export function decodeLayout(p: AttentionProblem): string {
  return p.paged ? `paged${p.paged.blockSize}` : 'dense';
}

/** The measured case that speaks for `p` on `device`, fastest first, or null. */
export function measuredDecodeOrder(
  p: AttentionProblem,
  device: DeviceClass,
  tables: readonly DecodeDispatchTable[] = DECODE_DISPATCH_TABLES,
): MeasuredDecodeOrder | null {
  if (!isMeasurableStep(p)) return null;
  const tokens = cachedTokens(p);
  const layout = decodeLayout(p);
  const nearest = nearestTables(tables, device);
  for (const table of nearest.tables) {
    if (table.dtype !== p.dtype) continue;
    const near = table.cases
      .filter(
        (c) =>
          c.N === p.N &&
          c.K === p.K &&
          c.H === p.H &&
          c.layout === layout &&
          tokens >= (c.B * c.S) / 2 &&
          tokens <= c.B * c.S * 2,
      )
      .sort((a, b) => Math.abs(Math.log(a.B / p.B)) - Math.abs(Math.log(b.B / p.B)));
    if (near.length === 0) continue;
    const measured = near[0];
    const ranked = (Object.entries(measured.gbs) as Array<[Implementation, number]>).sort(
      (a, b) => b[1] - a[1],
    );
    const order = ranked.map(([name]) => name);
    // Another bandwidth class than the record's (or one not known equal): flash first where it was
    // within TRANSFER_MARGIN of the leader (BANDWIDTH_TRANSFER).
    const flash = measured.gbs.flash;
    if (
      nearest.match < 2 &&
      flash !== undefined &&
      order[0] !== 'flash' &&
      flash >= ranked[0][1] * (1 - TRANSFER_MARGIN)
    )
      return {
        order: ['flash', ...order.filter((n) => n !== 'flash')],
        table,
        measured,
        match: nearest.match,
        transferred: true,
      };
    return { order, table, measured, match: nearest.match, transferred: false };
  }
  return null;
}
