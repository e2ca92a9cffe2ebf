/**
 * The measured order for decode steps with `implementation` unset — on a paged cache cuDNN's paged
 * attention or the flash decode kernels, on a dense cache (B, S, K, H) cuDNN's fused SDPA or the
 * flash decode kernels — from the recorded decode benchmarks of this GPU, as dispatch-table.ts
 * does for dense prefill. Each number is transcribed from a results file of the record (its
 * `sources`; bench/dispatch/make-decode-table.ts reads them, and test/cpu/dispatch-table.test.ts
 * checks the table against the files).
 *
 * A case speaks only for a decode step like the one measured: the same GPU, bf16, H = Hv, N, K and
 * layout (dense, or paged with the same block size), one new token (causal bottom-right or not: at T = 1 the bound drops nothing), no bias,
 * mask or window, a cache of about the measured size (cached tokens within a factor of 2 of the
 * case's B·S; of several, the case nearest in B), and for a paged cache a block table with room to
 * grow (tableHasRoom: cuDNN builds a graph per table width). Every other paged or packed problem runs
 * on the flash decode kernels (registry.ts), which were measured everywhere they run; every other
 * dense one follows the registry's order (cudnn first).
 *
 * What the numbers are: GB/s of K/V read once + Q + O, `timing` saying how each was taken — the
 * kernels alone (bench/decode/harness, CUDA events around the launches) or a library call
 * (bench/decode/decode-bench.ts, events around attention(), host work included). Where flash is
 * timed as kernels and still slower than cuDNN's library call, its library call is slower still.
 */
import type { AttentionProblem, Implementation } from './problem.js';

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
  /** `machine.gpu.name` of the record: the table applies only to a GPU of this name. */
  readonly gpu: string;
  readonly dtype: 'bfloat16';
  readonly cases: readonly MeasuredDecodeCase[];
}

const S7 = 'bench/results/2026-12-01-s7-decode';
// The heads kernel as decode-heads.ts configures it for a paged cache: 4 kv heads a block at K=8, 1 at K=1.
const heads4 = { kind: 'kernel', source: `${S7}/call1-bench.log.txt`, kernel: 'heads4.2x16.s3' } as const;
const heads1 = { kind: 'kernel', source: `${S7}/call1-bench.log.txt`, kernel: 'heads1.4x32.s3' } as const;
const cudnnCall = { kind: 'library', source: `${S7}/call1-cudnn-paged.json` } as const;
const flashCall = { kind: 'library', source: `${S7}/call2-b1.json` } as const;

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
 * The H200, session 7 (cuDNN 9.19.0, composite graph: engine 1, its sm80 wmma paged kernel; flash:
 * the heads kernel at long caches, the row-tile kernel at B=1 S=2k). cuDNN is faster at K=8 by
 * 4–5% at 1M cached tokens, and at B=1 S=2k, where both library calls are host-bound (flash's
 * kernels alone read 489 GB/s there, its call 206); flash is faster for MQA (K=1), where cuDNN's
 * kernel reads 1.6–2.4 TB/s.
 */
export const H200_PAGED_DECODE: DecodeDispatchTable = {
  gpu: 'NVIDIA H200',
  dtype: 'bfloat16',
  cases: [
    step(64, 16384, 8, 'paged16', [4201, heads4], [4401, cudnnCall]),
    step(64, 16384, 8, 'paged64', [4223, heads4], [4429, cudnnCall]),
    step(8, 131072, 8, 'paged16', [4150, heads4], [4361, cudnnCall]),
    step(8, 131072, 8, 'paged64', [4185, heads4], [4363, cudnnCall]),
    step(64, 16384, 1, 'paged16', [2801, heads1], [1555, cudnnCall]),
    step(64, 16384, 1, 'paged64', [2767, heads1], [2408, cudnnCall]),
    step(1, 2048, 8, 'paged16', [206, flashCall], [279, cudnnCall]),
  ],
};

export const DECODE_DISPATCH_TABLES: readonly DecodeDispatchTable[] = [H200_PAGED_DECODE];

export interface MeasuredDecodeOrder {
  /** Backend names, fastest first. */
  readonly order: readonly Implementation[];
  readonly table: DecodeDispatchTable;
  readonly measured: MeasuredDecodeCase;
}

/**
 * Whether the next decode steps keep `p`'s cuDNN graph: a block table with room for one more block
 * for its longest sequence. A tight table (KVCache's is) widens every blockSize tokens, and each
 * width is a new cuDNN graph, 0.27–2.9 s to build (bench/results/2026-12-01-s6-paged) against the
 * ~0.05 ms per step cuDNN saves at 1M tokens (4.40 vs 4.20 TB/s): there the flash kernels, which
 * need no build, are the faster choice for a growing cache. (The measured calls repeated one fixed
 * table; whether cuDNN's time grows with unused table width was not measured.)
 */
function tableHasRoom(p: AttentionProblem): boolean {
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

/** The measured case that speaks for `p` on a GPU named `gpu`, fastest first, or null. */
export function measuredDecodeOrder(
  p: AttentionProblem,
  gpu: string,
  tables: readonly DecodeDispatchTable[] = DECODE_DISPATCH_TABLES,
): MeasuredDecodeOrder | null {
  if (!isMeasurableStep(p)) return null;
  const tokens = p.keyValueSeqLengths ? p.keyValueSeqLengths.reduce((a, l) => a + l, 0) : p.B * p.S;
  const layout = decodeLayout(p);
  for (const table of tables) {
    if (table.gpu !== gpu || table.dtype !== p.dtype) continue;
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
    const order = (Object.entries(measured.gbs) as Array<[Implementation, number]>)
      .sort((a, b) => b[1] - a[1])
      .map(([name]) => name);
    return { order, table, measured };
  }
  return null;
}
