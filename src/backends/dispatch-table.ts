/**
 * The recorded dispatch tables: with `implementation` unset and no calibrated entry for the case
 * (calibrated-dispatch-table.ts), which CUDA backend runs a case first is decided by a recorded
 * benchmark of a GPU of the same architecture (device-dispatch-table.ts), not by a fixed order. Each
 * table is generated from one results file of `attnlab bench` (scripts/dispatch-tables.ts prints the
 * tables, and test/unit/backends/dispatch-table.test.ts checks them against the file), and carries the device
 * class and provenance (GPU, commit, suite, date) of that file as data.
 *
 * A measurement speaks only for the case it measured: the same architecture, dtype, head dims, causality, no
 * bias, mask, window, paged or packed layout, and sequences long enough that the kernels' steady
 * state decides (T and S at least MIN_MEASURED_LENGTH; at T ≤ 64 per kv head the flash backend takes
 * its decode kernel, which the bench did not time). Where a sweep measured several lengths, the one
 * nearest to the case's (√(T·S), in octaves) speaks: on the H200 the Hopper kernel trails cuDNN at
 * T ≤ 4k (0.86× at 1k) and leads from 8k, so one length cannot speak for all. Everything else keeps the
 * registry's order. Batch and GQA change neither backend's kernel choice, so they keep the measurement.
 */
import {
  type DeviceClass,
  type DeviceMatch,
  matchWords,
  modelWords,
  nearestTables,
} from './device-dispatch-table.js';
import type { AttentionProblem, Implementation } from './problem.js';

/** Where a recorded table comes from: the results file and what it says of its run. */
export interface Provenance {
  /** The results file (repository path). */
  readonly source: string;
  /** `machine.gpu.name` of the file. */
  readonly gpu: string;
  /** The attnlab commit that ran it (`attnlab.commit`), or null where the file does not say. */
  readonly commit: string | null;
  /** The bench suite: the folder of benchmarks/results/<gpu>/<suite>/, or the file's `kind`. */
  readonly suite: string;
  /** The day it ran (`createdAt`, YYYY-MM-DD), or null where the file does not say. */
  readonly date: string | null;
}

export interface MeasuredCase {
  readonly dtype: 'bfloat16' | 'float16';
  /** H = Hv of the measured rows. */
  readonly H: number;
  readonly causal: boolean;
  /** Median TFLOP/s of each backend in that run. */
  readonly tflops: Partial<Record<Implementation, number>>;
}

export interface DispatchTable {
  /** The results file the cases come from (repository path). */
  readonly source: string;
  readonly provenance: Provenance;
  /** The GPU of that file as dispatch keys it: the table applies to every GPU of its architecture. */
  readonly device: DeviceClass;
  /** The `flash` kernel family the measured flash rows ran (their variant ends in it). */
  readonly flashKernel: 'wgmma' | 'mma';
  readonly shape: { readonly B: number; readonly T: number; readonly S: number; readonly N: number };
  readonly cases: readonly MeasuredCase[];
}

/** Below this T or S a case is not the one measured (8192): launch and tail effects dominate. */
export const MIN_MEASURED_LENGTH = 1024;

/**
 * The H200's forward bench (benchmarks/results/h200/forward/2026-12-01-head-dims-t-sweep, the bench script at fe66fdd: the Hopper
 * kernel with the rescale slack and three consumers on 192×80 tiles at H=128 from T=8192,
 * with the dynamic persistent grid where hopper-variant.ts takes it, beside attnlab cudnn and PyTorch in
 * the same run): the headline shape B=4, T=S=8192 at H = 64/128/256, and the T sweep at B·T = 32k at
 * H=128 — cudnn leads at 1k and 2k (by 4–16%), the two are level at 4k (flash by 0.2–0.3%), flash
 * leads from 8k (by 3–11%).
 */
const H200_SOURCE = 'benchmarks/results/h200/forward/2026-12-01-head-dims-t-sweep/h200-forward.json';
/**
 * H=192 (the Hopper kernel's D=192 tile, BN=112), the headline shape
 * (benchmarks/results/h200/forward/2026-12-01-h192-and-split-head-dims, the bench script with --quick --head-dims=192 at c49fda8): flash 1.076 /
 * 1.052 of cudnn.
 */
const H200_H192_SOURCE = 'benchmarks/results/h200/forward/2026-12-01-h192-and-split-head-dims/h200-h192.json';
/** The H200 as its results files record it (they record neither SM count nor bandwidth). */
const H200: DeviceClass = {
  gpu: 'NVIDIA H200',
  computeCapability: '9.0',
  multiprocessors: null,
  memoryBandwidthGBs: null,
  cudnn: '9.19.0',
};
const PROVENANCE: Record<string, Provenance> = {
  [H200_SOURCE]: {
    source: H200_SOURCE,
    gpu: 'NVIDIA H200',
    commit: 'fe66fdd',
    suite: 'forward',
    date: '2026-12-01',
  },
  [H200_H192_SOURCE]: {
    source: H200_H192_SOURCE,
    gpu: 'NVIDIA H200',
    commit: 'c49fda8',
    suite: 'forward',
    date: '2026-12-01',
  },
};
const h200 = (
  B: number,
  T: number,
  cases: ReadonlyArray<readonly [H: number, causal: boolean, flash: number, cudnn: number]>,
  source = H200_SOURCE,
): DispatchTable => ({
  source,
  provenance: PROVENANCE[source],
  device: H200,
  flashKernel: 'wgmma',
  shape: { B, T, S: T, N: 16 },
  cases: cases.map(([H, causal, flash, cudnn]) => ({
    dtype: 'bfloat16',
    H,
    causal,
    tflops: { flash, cudnn },
  })),
});

/** The H200's tables, shortest sequences first; H200_DISPATCH[3] is the headline shape (T = 8192), [4] its H=192. */
export const H200_DISPATCH: readonly DispatchTable[] = [
  h200(32, 1024, [
    [128, false, 475.7, 528.8],
    [128, true, 313.3, 364.9],
  ]),
  h200(16, 2048, [
    [128, false, 538.2, 560.1],
    [128, true, 415.5, 439.2],
  ]),
  h200(8, 4096, [
    [128, false, 580.3, 578.9],
    [128, true, 496.3, 494.7],
  ]),
  h200(4, 8192, [
    [64, false, 491.9, 450.2],
    [128, false, 625.6, 567.6],
    [256, false, 691.1, 639.6],
    [64, true, 432.8, 411.3],
    [128, true, 550.1, 535.9],
    [256, true, 637.8, 592.2],
  ]),
  h200(
    4,
    8192,
    [
      [192, false, 668.2, 621.1],
      [192, true, 605.3, 575.3],
    ],
    H200_H192_SOURCE,
  ),
  h200(2, 16384, [
    [128, false, 647, 600.6],
    [128, true, 592.9, 560.3],
  ]),
  h200(1, 32768, [
    [128, false, 656, 602.5],
    [128, true, 631.9, 569.4],
  ]),
];

export const DISPATCH_TABLES: readonly DispatchTable[] = H200_DISPATCH;

/** What the caller knows of the device: its class, and which flash kernel `p` would run (asked
 * only when a measurement matches, so the common small call pays for neither). */
export interface DispatchDevice {
  readonly device: DeviceClass;
  /** The kernel family the flash backend's plan of the problem runs (a table's flash rows count only on it). */
  flashKernel(): string;
}

export interface MeasuredOrder {
  /** Backend names, fastest first. */
  readonly order: readonly Implementation[];
  readonly table: DispatchTable;
  readonly measured: MeasuredCase;
  /** How near the table's GPU is to this one (device-dispatch-table.ts). */
  readonly match: DeviceMatch;
}

/** The measured case that speaks for `p` on `device`, or null. */
export function measuredCase(
  p: AttentionProblem,
  device: DispatchDevice,
  tables: readonly DispatchTable[] = DISPATCH_TABLES,
): { table: DispatchTable; measured: MeasuredCase; match: DeviceMatch } | null {
  if (p.bias || p.mask || p.window || p.paged || p.packed || p.H !== p.Hv) return null;
  if (p.T < MIN_MEASURED_LENGTH || p.S < MIN_MEASURED_LENGTH) return null;
  const near = nearestTables(tables, device.device);
  let nearest: { table: DispatchTable; measured: MeasuredCase; match: DeviceMatch } | null = null;
  let nearestOctaves = Number.POSITIVE_INFINITY;
  for (const table of near.tables) {
    const measured = table.cases.find((c) => c.dtype === p.dtype && c.H === p.H && c.causal === p.causal);
    if (!measured) continue;
    const octaves = Math.abs(Math.log2(Math.sqrt((p.T * p.S) / (table.shape.T * table.shape.S))));
    if (octaves < nearestOctaves)
      [nearest, nearestOctaves] = [{ table, measured, match: near.match }, octaves];
  }
  return nearest;
}

/**
 * The backends of the measured case for `p`, fastest first, or null where no measurement speaks for
 * it. A flash measurement counts only when `p` runs the kernel family that was measured.
 */
export function measuredOrder(
  p: AttentionProblem,
  device: DispatchDevice,
  tables: readonly DispatchTable[] = DISPATCH_TABLES,
): MeasuredOrder | null {
  const found = measuredCase(p, device, tables);
  if (!found) return null;
  const entries = Object.entries(found.measured.tflops) as Array<[Implementation, number]>;
  const flashMeasured = device.flashKernel() === found.table.flashKernel;
  const order = entries
    .filter(([name]) => name !== 'flash' || flashMeasured)
    .sort((a, b) => b[1] - a[1])
    .map(([name]) => name);
  return { order, ...found };
}

/**
 * `backends` reordered for `order`: the measured ones first, fastest first, then the rest in their
 * table order. Stable, so a backend the measurement does not name keeps its relative place.
 */
export function orderByMeasurement<E extends { readonly name: string }>(
  backends: readonly E[],
  order: readonly string[],
): E[] {
  const rank = (b: E) => {
    const i = order.indexOf(b.name);
    return i < 0 ? order.length : i;
  };
  return backends
    .map((backend, index) => ({ backend, index }))
    .sort((a, b) => rank(a.backend) - rank(b.backend) || a.index - b.index)
    .map(({ backend }) => backend);
}

/**
 * What `implementation: undefined` follows on `device` from the recorded tables, in one line for
 * `attnlab info`: which table applies (this GPU's, or one of its architecture) and per measured
 * (dtype, H, causality) the fastest backend over runs of measured lengths, e.g. "bfloat16 H=128: cudnn
 * at T=S 1024–2048, flash at 4096–32768"; or that none applies (then the model decides). The flash
 * rows count for the kernel family measured.
 */
export function autoDispatchSummary(
  device: DeviceClass | null,
  registryOrder: readonly string[],
  tables: readonly DispatchTable[] = DISPATCH_TABLES,
): string {
  const near = device ? nearestTables(tables, device) : { tables: [], match: 0 as const };
  const mine = near.tables;
  if (mine.length === 0) {
    const measured = [
      ...new Set(tables.map((t) => `${t.device.gpu} (sm_${t.device.computeCapability.replace('.', '')})`)),
    ].join(', ');
    const where = device
      ? `${device.gpu}'s architecture (sm_${device.computeCapability.replace('.', '')})`
      : 'this machine (no GPU)';
    return `${modelWords(registryOrder)}: no recorded benchmark for ${where} (recorded: ${measured})`;
  }
  const points = new Map<string, Array<{ length: number; fastest: string }>>();
  for (const table of [...mine].sort((a, b) => a.shape.T - b.shape.T)) {
    for (const c of table.cases) {
      const [fastest] = Object.entries(c.tflops).sort((a, b) => b[1] - a[1])[0];
      const key = `${c.dtype} H=${c.H}${c.causal ? ' causal' : ''}`;
      points.set(key, [...(points.get(key) ?? []), { length: table.shape.T, fastest }]);
    }
  }
  const lines = [...points].map(([key, list]) => {
    const parts: string[] = [];
    for (let start = 0, i = 1; i <= list.length; i++) {
      if (i < list.length && list[i].fastest === list[start].fastest) continue;
      const [a, b] = [list[start].length, list[i - 1].length];
      parts.push(`${list[start].fastest} at T=S ${a === b ? a : `${a}–${b}`}`);
      start = i;
    }
    return `${key}: ${parts.join(', ')}`;
  });
  const sources = [...new Set(mine.map((t) => t.source))].join(', ');
  const kernel = mine[0].flashKernel === 'wgmma' ? 'the Hopper kernel' : 'the mma.sync kernel';
  const where = matchWords(near.match, mine[0].device);
  return `${where} (flash = ${kernel}; ${sources}): ${lines.join('; ')}; other cases: ${modelWords(registryOrder)}`;
}
