/**
 * `attnlab check`'s loop: the suite (suite.ts) for every backend on every available device — the
 * same cases, precisions and rows as the CPU and GPU tests — against the float64 reference. The
 * reference backend is the oracle and is not checked against itself.
 */

import { cudaAvailable } from '../backends/cuda/runtime/context.js';
import type { Implementation } from '../backends/problem.js';
import { BACKENDS } from '../backends/registry.js';
import type { Device } from '../tensor/storage.js';
import type { AttentionCase } from './cases.js';
import { RANDOM_CASES_SEED } from './random-cases.js';
import {
  type CaseCheck,
  type CheckRow,
  checkCase,
  checkCaseAsync,
  DEVICE_PRECISIONS,
  OracleCache,
  PRECISIONS,
  suiteCases,
} from './suite.js';

export interface CheckOptions {
  devices?: Device[];
  backends?: Implementation[];
  /** Precisions to run on every device (default: DEVICE_PRECISIONS of each). */
  precisions?: Array<keyof typeof PRECISIONS>;
  /** Keeps the cases it returns true for (default: all of suiteCases). */
  filter?: (c: AttentionCase) => boolean;
  /** Seed of the inputs (default: time-based); case i gets seed + 16·i. */
  seed?: number;
  /** Seed of the random cases (default RANDOM_CASES_SEED, as in the tests). */
  casesSeed?: number;
  onRow?: (row: CheckRow) => void;
}

export function runCheck(options: CheckOptions = {}): CheckRow[] {
  return checkJobs(options).map((job) => {
    const row = checkCase(job);
    options.onRow?.(row);
    return row;
  });
}

/**
 * runCheck with the outputs read back asynchronously (checkCaseAsync): the one way to check the
 * webgpu backend (`attnlab check --device webgpu`); the same rows for the other devices.
 */
export async function runCheckAsync(options: CheckOptions = {}): Promise<CheckRow[]> {
  const rows: CheckRow[] = [];
  for (const job of checkJobs(options)) {
    const row = await checkCaseAsync(job);
    rows.push(row);
    options.onRow?.(row);
  }
  return rows;
}

/** Every (backend, case, precision, seed) the options select, in the order they run. */
function checkJobs(options: CheckOptions): CaseCheck[] {
  const devices = options.devices ?? (cudaAvailable().ok ? ['cpu', 'cuda'] : ['cpu']);
  const seed = options.seed ?? Date.now() % 1_000_000;
  const jobs: CaseCheck[] = [];
  const oracles = new OracleCache();
  for (const device of devices) {
    const cases = suiteCases(device, options.casesSeed ?? RANDOM_CASES_SEED);
    const precisions = options.precisions?.map((p) => PRECISIONS[p]) ?? DEVICE_PRECISIONS[device];
    for (const backend of BACKENDS) {
      if (backend.device !== device || backend.name === 'reference') continue;
      if (options.backends && !options.backends.includes(backend.name)) continue;
      cases.forEach((c, index) => {
        if (options.filter && !options.filter(c)) return;
        for (const precision of precisions)
          jobs.push({ backend, case: c, precision, seed: seed + 16 * index, oracles });
      });
    }
  }
  return jobs;
}
