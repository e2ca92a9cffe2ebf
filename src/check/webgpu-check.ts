/**
 * The correctness suite on the webgpu backend, asynchronously (outputs read back with mapAsync),
 * for the browser entry and its page: the suite's cases (hand-picked, long and random) at float32
 * and float16, each judged against the float64 reference as every backend is (suite.ts).
 */
import { webgpuBackend } from '../backends/webgpu/backend.js';
import type { AttentionCase } from './cases.js';
import {
  type CheckRow,
  checkCaseAsync,
  DEVICE_PRECISIONS,
  OracleCache,
  type SuitePrecision,
  suiteCases,
} from './suite.js';

export interface WebgpuCheckOptions {
  /** Default: every case of the GPU suite (hand-picked, long, 20 random). */
  readonly cases?: readonly AttentionCase[];
  /** Default: float32 and float16. */
  readonly precisions?: readonly SuitePrecision[];
  /** The inputs' seed; default 1. */
  readonly seed?: number;
  /** Called with each row as it is judged (a page shows progress with it). */
  readonly onRow?: (row: CheckRow) => void;
}

/** Runs the suite on webgpu and returns its rows; `initWebgpu()` first. */
export async function runWebgpuCheck(options: WebgpuCheckOptions = {}): Promise<CheckRow[]> {
  const cases = options.cases ?? suiteCases('webgpu');
  const precisions = options.precisions ?? DEVICE_PRECISIONS.webgpu;
  const seed = options.seed ?? 1;
  const oracles = new OracleCache();
  const rows: CheckRow[] = [];
  for (const [index, c] of cases.entries()) {
    for (const precision of precisions) {
      const row = await checkCaseAsync({
        backend: webgpuBackend,
        case: c,
        precision,
        seed: seed + 16 * index,
        oracles,
      });
      rows.push(row);
      options.onRow?.(row);
    }
  }
  return rows;
}
