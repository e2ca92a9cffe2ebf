/**
 * The measured dispatch table: with `implementation` unset, which CUDA backend runs a case first is
 * decided by the recorded benchmark of this GPU, not by a fixed order. Each table is transcribed from
 * one results file of `attnlab bench` (its `source`; bench/dispatch/make-table.ts prints the rows,
 * and test/cpu/dispatch-table.test.ts checks them against the file), for the GPU named in the file.
 *
 * A measurement speaks only for the case it measured: the same GPU, dtype, head dims, causality, no
 * bias, mask, window, paged or packed layout, and sequences long enough that the kernels' steady
 * state decides (T and S at least MIN_MEASURED_LENGTH; at T ≤ 64 per kv head the flash backend takes
 * its decode kernel, which the bench did not time). Everything else keeps the registry's order.
 * Lengths and GQA change neither backend's kernel choice, so they keep the case's measurement.
 */
import type { AttentionProblem, Implementation } from './problem.js';

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
  /** `machine.gpu.name` of that file: the table applies only to a GPU of this name. */
  readonly gpu: string;
  /** The `flash` kernel family the measured flash rows ran (their variant ends in it). */
  readonly flashKernel: 'wgmma' | 'mma';
  readonly shape: { readonly B: number; readonly T: number; readonly S: number; readonly N: number };
  readonly cases: readonly MeasuredCase[];
}

/** Below this T or S a case is not the one measured (8192): launch and tail effects dominate. */
export const MIN_MEASURED_LENGTH = 1024;

/**
 * The H200, session 7's bench of the Hopper kernel with the P·V wait after the softmax and stepped
 * descriptors (bench/results/2026-12-01-s7-hopper, the headline rows of call 3's s7-bench.json, run
 * at 7bfe35b). Session 6's table (flash 485.3/411.7, 594.6/532.5, 667/614.1 TFLOP/s) is superseded:
 * H=128 and H=64 causal moved from cudnn to flash (H=128 non-causal by 0.8%, inside the run-to-run
 * spread of ~1–3%; the other five by 1.3–10%).
 */
export const H200_DISPATCH: DispatchTable = {
  source: 'bench/results/2026-12-01-s7-hopper/h200-s7-headline.json',
  gpu: 'NVIDIA H200',
  flashKernel: 'wgmma',
  shape: { B: 4, T: 8192, S: 8192, N: 16 },
  cases: [
    { dtype: 'bfloat16', H: 64, causal: false, tflops: { flash: 506.7, cudnn: 459 } },
    { dtype: 'bfloat16', H: 128, causal: false, tflops: { flash: 617.9, cudnn: 613.1 } },
    { dtype: 'bfloat16', H: 256, causal: false, tflops: { flash: 697.5, cudnn: 665.9 } },
    { dtype: 'bfloat16', H: 64, causal: true, tflops: { flash: 427.8, cudnn: 422.4 } },
    { dtype: 'bfloat16', H: 128, causal: true, tflops: { flash: 556, cudnn: 547.3 } },
    { dtype: 'bfloat16', H: 256, causal: true, tflops: { flash: 639.2, cudnn: 617.1 } },
  ],
};

export const DISPATCH_TABLES: readonly DispatchTable[] = [H200_DISPATCH];

/** What the caller knows of the device: the GPU's name, and which flash kernel `p` would run (asked
 * only when a measurement matches, so the common small call pays for neither). */
export interface DispatchDevice {
  readonly gpu: string;
  flashKernel(): 'wgmma' | 'mma';
}

export interface MeasuredOrder {
  /** Backend names, fastest first. */
  readonly order: readonly Implementation[];
  readonly table: DispatchTable;
  readonly measured: MeasuredCase;
}

/** The measured case that speaks for `p` on `device`, or null. */
export function measuredCase(
  p: AttentionProblem,
  device: DispatchDevice,
  tables: readonly DispatchTable[] = DISPATCH_TABLES,
): { table: DispatchTable; measured: MeasuredCase } | null {
  if (p.bias || p.mask || p.window || p.paged || p.packed || p.H !== p.Hv) return null;
  if (p.T < MIN_MEASURED_LENGTH || p.S < MIN_MEASURED_LENGTH) return null;
  for (const table of tables) {
    if (table.gpu !== device.gpu) continue;
    const measured = table.cases.find((c) => c.dtype === p.dtype && c.H === p.H && c.causal === p.causal);
    if (measured) return { table, measured };
  }
  return null;
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
