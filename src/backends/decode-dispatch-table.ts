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

const S8 = 'bench/results/2026-12-01-s8-decode';
// Library calls (bench/decode/decode-bench.ts --table-room: block tables with one spare column, the
// tables this table speaks for), flash, cudnn and PyTorch in one run.
const call = { kind: 'library', source: `${S8}/call2-library.json` } as const;
// Session 11's last call (d1c1b3e), MQA (K=1) on flash's TMA decode kernel (decode-tma.ts: row groups and
// grouped boxes since session 11) and cudnn in one run beside PyTorch.
const S11 = 'bench/results/2026-12-02-s11-final';
const callS11 = { kind: 'library', source: `${S11}/call8-decode.json` } as const;

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
 * The H200, session 8 (cuDNN 9.19.0: dense on the unified graph, engine 8, paged on the composite
 * graph, engine 1, both its sm80 wmma kernel; flash: the heads kernel from 128k cached tokens, the
 * row-tile kernel below). cuDNN is faster on every dense cache measured at K=8 and K=4 (4.45–4.47 TB/s
 * at 1M tokens against flash's 4.02–4.26; B=1 S=32k 3.27 vs 2.74) and on paged caches at K=8 and
 * K=4 (4.30–4.47 against 4.09–4.25; B=128 S=8k block 16: 4.45 vs 3.72, where flash's kernels alone
 * read 4.15 in the same session); flash at B=1 (S=2k: 0.21 vs 0.16, S=32k: 2.35–2.50 vs 1.81–2.15).
 * MQA (K=1) from session 11's last call, flash on its TMA kernel: flash everywhere; B=64 S=16k paged
 * block 16 3.76 vs 2.42, block 64 3.99 vs 2.43, dense 4.10 vs 3.35; B=8 S=128k 3.77 / 3.82 / 3.93 vs
 * 2.84 / 2.79 / 2.77 (session 10: 3.81 / 3.84 / 3.89 at B=64, one block a key range; session 9:
 * 3.75 / 3.66 / 3.66 before the maps dropped their L2 promotion; session 8 had flash's heads kernel at
 * 0.92 / 2.87 paged and 3.05 dense, cuDNN first on the dense cache). Not recorded: dense B=1 S=2k, where the two are within
 * the run's noise (flash 276 GB/s, cudnn 265 and 307 in two rows of the same call): the registry's
 * order (cudnn first) stays.
 */
export const H200_DECODE: DecodeDispatchTable = {
  gpu: 'NVIDIA H200',
  dtype: 'bfloat16',
  cases: [
    step(64, 16384, 8, 'dense', [4208, call], [4449, call]),
    step(8, 131072, 8, 'dense', [4211, call], [4465, call]),
    step(128, 8192, 8, 'dense', [4260, call], [4454, call]),
    step(64, 16384, 4, 'dense', [4024, call], [4462, call]),
    step(64, 16384, 1, 'dense', [4095, callS11], [3351, callS11]),
    step(8, 131072, 1, 'dense', [3934, callS11], [2765, callS11]),
    step(1, 32768, 8, 'dense', [2744, call], [3268, call]),
    step(64, 16384, 8, 'paged16', [4240, call], [4406, call]),
    step(64, 16384, 8, 'paged64', [4245, call], [4428, call]),
    step(8, 131072, 8, 'paged16', [4175, call], [4371, call]),
    step(8, 131072, 8, 'paged64', [4185, call], [4366, call]),
    step(128, 8192, 8, 'paged16', [3720, call], [4452, call]),
    step(128, 8192, 8, 'paged64', [4216, call], [4467, call]),
    step(64, 16384, 4, 'paged16', [4094, call], [4298, call]),
    step(64, 16384, 4, 'paged64', [4149, call], [4366, call]),
    step(64, 16384, 1, 'paged16', [3763, callS11], [2421, callS11]),
    step(64, 16384, 1, 'paged64', [3993, callS11], [2431, callS11]),
    step(8, 131072, 1, 'paged16', [3767, callS11], [2837, callS11]),
    step(8, 131072, 1, 'paged64', [3820, callS11], [2788, callS11]),
    step(1, 2048, 8, 'paged16', [213, call], [159, call]),
    step(1, 2048, 8, 'paged64', [198, call], [149, call]),
    step(1, 32768, 8, 'paged16', [2351, call], [1808, call]),
    step(1, 32768, 8, 'paged64', [2497, call], [2153, call]),
  ],
};

export const DECODE_DISPATCH_TABLES: readonly DecodeDispatchTable[] = [H200_DECODE];

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
