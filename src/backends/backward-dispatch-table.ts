/**
 * The recorded order for the backward with `implementation` unset, beside the forward's (dispatch-table.ts)
 * and the decode step's (decode-dispatch-table.ts): which CUDA backend computes the gradients first on a
 * GPU of the architecture, from backward runs that timed cudnn and flash in one process. Each number is
 * transcribed from the file its case cites (test/unit/backends/backward-dispatch-table.test.ts checks them
 * against the files).
 *
 * A case speaks only for a backward like the one measured: the same architecture (the nearest recorded GPU,
 * device-dispatch-table.ts; a calibrated entry comes first), its dtype, H = Hv at the measured head dim,
 * its causality (top-left or bottom-right at T = S alike), no bias, mask, window, modifiers or lengths,
 * a dense layout, T and S at least MIN_MEASURED_LENGTH (the runs are at 8192, where the loops' steady state
 * decides), and the non-deterministic loop (the flash numbers are its; a deterministic flash backward
 * orders its dQ adds at 0.87–0.95× of them, cudnn the same engine). Batch and GQA change neither backend's
 * kernel. Everything else follows the model (backward-registry.ts): cudnn, flash, naive.
 *
 * What the numbers are: TFLOP/s of the backward alone (2.5× the forward's FLOPs, halved for causal), the
 * forward's residuals made beforehand, median of alternating rounds in one process
 * (benchmarks/harnesses/backward-loop-variants.ts) or of one `attnlab bench --pass backward` run.
 */
import { type DeviceClass, type DeviceMatch, matchWords, nearestTables } from './device-dispatch-table.js';
import { MIN_MEASURED_LENGTH } from './dispatch-table.js';
import type { AttentionProblem, Implementation } from './problem.js';

export interface MeasuredBackwardCase {
  readonly dtype: 'bfloat16';
  /** H = Hv of the measured runs. */
  readonly H: number;
  readonly causal: boolean;
  /** TFLOP/s of each backend. */
  readonly tflops: Partial<Record<Implementation, number>>;
  /** The results file (repository path) the numbers are in. */
  readonly source: string;
}

export interface BackwardDispatchTable {
  /** The GPU of the record as dispatch keys it: it applies to its architecture. */
  readonly device: DeviceClass;
  readonly shape: { readonly B: number; readonly T: number; readonly S: number; readonly N: number };
  readonly cases: readonly MeasuredBackwardCase[];
}

const H100_H128 = 'benchmarks/results/h100-sxm/backward/2026-12-06-f9447fd-loops.txt';
const H100_H64 = 'benchmarks/results/h100-sxm/backward/2026-12-06-64ffe4a-loops-h64.txt';

/**
 * The H100 SXM (cuDNN 9.19.0, its composite backward engine 6): at H=128 flash's lean wgmma loop
 * (`….lean.wgmma`) against cudnn in the same rounds (H100_H128); at H=64 the producer-warpgroup loop
 * (`….wgmma-ws`, the H=64 default) against cudnn (H100_H64). cuDNN leads by 1.2–1.6×.
 */
export const H100_BACKWARD: BackwardDispatchTable = {
  device: {
    gpu: 'NVIDIA H100 80GB HBM3',
    computeCapability: '9.0',
    multiprocessors: 132,
    memoryBandwidthGBs: 3352,
    cudnn: '9.19.0',
  },
  shape: { B: 4, T: 8192, S: 8192, N: 16 },
  cases: [
    { dtype: 'bfloat16', H: 128, causal: false, tflops: { cudnn: 527.4, flash: 429.2 }, source: H100_H128 },
    { dtype: 'bfloat16', H: 128, causal: true, tflops: { cudnn: 513.0, flash: 409.5 }, source: H100_H128 },
    { dtype: 'bfloat16', H: 64, causal: false, tflops: { cudnn: 471.6, flash: 292.1 }, source: H100_H64 },
    { dtype: 'bfloat16', H: 64, causal: true, tflops: { cudnn: 412.2, flash: 291.3 }, source: H100_H64 },
  ],
};

const H200_CUDNN = 'benchmarks/results/h200/backward/2026-12-01-cudnn-vs-peers/h200-backward-h128.json';
const H200_FLASH = 'benchmarks/results/h200/backward/2026-12-01-flash-wgmma-one-barrier/flash-backward.json';

/**
 * The H200 (cuDNN 9.19.0): H=128 only, cudnn (H200_CUDNN) and flash's wgmma loop as it was then
 * (H200_FLASH: one barrier a step, 316 / 309) from two runs of the same day on the same machine type;
 * cuDNN led by 1.6–1.7×, and the H100's later loops (lean, 429 / 410) still trail cuDNN's 527 / 513 there.
 * Its source names cudnn's file; flash's is H200_FLASH.
 */
export const H200_BACKWARD: BackwardDispatchTable = {
  device: {
    gpu: 'NVIDIA H200',
    computeCapability: '9.0',
    multiprocessors: 132,
    memoryBandwidthGBs: 4916,
    cudnn: '9.19.0',
  },
  shape: { B: 4, T: 8192, S: 8192, N: 16 },
  cases: [
    { dtype: 'bfloat16', H: 128, causal: false, tflops: { cudnn: 533.0, flash: 315.6 }, source: H200_CUDNN },
    { dtype: 'bfloat16', H: 128, causal: true, tflops: { cudnn: 496.5, flash: 308.7 }, source: H200_CUDNN },
  ],
};

/** Where each H200 flash number comes from (the cases cite cudnn's file). */
export const H200_BACKWARD_FLASH_SOURCE = H200_FLASH;

export const BACKWARD_DISPATCH_TABLES: readonly BackwardDispatchTable[] = [H100_BACKWARD, H200_BACKWARD];

/** What of a backward problem the lookup reads: a forward problem's fields and the loop asked for. */
export type BackwardCaseProblem = AttentionProblem & { readonly deterministic: boolean };

export interface MeasuredBackwardOrder {
  /** Backend names, fastest first. */
  readonly order: readonly Implementation[];
  readonly table: BackwardDispatchTable;
  readonly measured: MeasuredBackwardCase;
  readonly match: DeviceMatch;
}

/** Whether a measured case can speak for `p` (the header's conditions but the GPU and head dim). */
function isMeasurable(p: BackwardCaseProblem): boolean {
  return (
    !p.deterministic &&
    !p.bias &&
    !p.mask &&
    !p.window &&
    !p.paged &&
    !p.packed &&
    !p.modifiers &&
    p.querySeqLengths === null &&
    p.keyValueSeqLengths === null &&
    p.H === p.Hv &&
    p.T >= MIN_MEASURED_LENGTH &&
    p.S >= MIN_MEASURED_LENGTH
  );
}

/** The measured case that speaks for `p` on `device`, fastest first, or null. */
export function measuredBackwardOrder(
  p: BackwardCaseProblem,
  device: DeviceClass,
  tables: readonly BackwardDispatchTable[] = BACKWARD_DISPATCH_TABLES,
): MeasuredBackwardOrder | null {
  if (!isMeasurable(p)) return null;
  const near = nearestTables(tables, device);
  for (const table of near.tables) {
    const measured = table.cases.find((c) => c.dtype === p.dtype && c.H === p.H && c.causal === p.causal);
    if (!measured) continue;
    const order = (Object.entries(measured.tflops) as Array<[Implementation, number]>)
      .sort((a, b) => b[1] - a[1])
      .map(([name]) => name);
    return { order, table, measured, match: near.match };
  }
  return null;
}

/** The words of a recorded backward decision, for ATTNLAB_DEBUG and measure-auto's rows. */
export function backwardWhy(found: MeasuredBackwardOrder): string {
  const numbers = found.order.map((name) => `${name} ${found.measured.tflops[name]}`).join(' > ');
  const { T } = found.table.shape;
  return `${matchWords(found.match, found.table.device)}: ${numbers} TFLOP/s backward at T=S=${T} H=${found.measured.H}${found.measured.causal ? ' causal' : ''} (${found.measured.source})`;
}

/**
 * What the backward with `implementation: undefined` follows on `device` from the recorded tables, in one
 * line for `attnlab info`: the table that applies and per measured (dtype, H, causality) its fastest backend,
 * or that none applies (then the model decides).
 */
export function backwardDispatchSummary(
  device: DeviceClass | null,
  model: string,
  tables: readonly BackwardDispatchTable[] = BACKWARD_DISPATCH_TABLES,
): string {
  const near = device ? nearestTables(tables, device) : { tables: [], match: 0 as const };
  if (near.tables.length === 0) {
    const recorded = tables.map((t) => t.device.gpu).join(', ');
    return `${model}: no recorded backward for this ${device ? 'architecture' : 'machine (no GPU)'} (recorded: ${recorded})`;
  }
  const table = near.tables[0];
  const cases = table.cases.map((c) => {
    const [fastest] = Object.entries(c.tflops).sort((a, b) => b[1] - a[1])[0];
    return `${c.dtype} H=${c.H}${c.causal ? ' causal' : ''}: ${fastest}`;
  });
  return `${matchWords(near.match, table.device)} (T=S=${table.shape.T}): ${cases.join(', ')}; other cases: ${model}`;
}
