/**
 * The correctness suite (src/check/suite.ts) as node:test cases for one backend: one test per case
 * and precision, passing, failing with the suite's one printout (describeRow), or skipped with the
 * backend's own reason. test/gpu/forward/{flash,naive,cudnn}.test.ts call it for their backend, and
 * test/unit/check/suite.test.ts calls the very same function for the CPU backends, so a bug in this runner
 * shows up in CI, where no GPU is.
 *
 * Seeds: ATTNLAB_TEST_SEED replays a run's inputs (printed by each suite; time-based by default);
 * ATTNLAB_TEST_CASES_SEED draws other random cases than the default draw.
 */
import assert from 'node:assert/strict';
import { it } from 'node:test';
import type { AttentionBackend } from '../../src/backends/backend.js';
import type { AttentionOptions, AttentionProblem, BackendOutput } from '../../src/backends/problem.js';
import type { Precision } from '../../src/check/accuracy.js';
import type { AttentionCase } from '../../src/check/cases.js';
import { RANDOM_CASES_SEED } from '../../src/check/random-cases.js';
import {
  type CheckRow,
  checkCase,
  checkCaseAsync,
  DEVICE_PRECISIONS,
  describeRow,
  judgeForward,
  OracleCache,
  type SuitePrecision,
  suiteCases,
} from '../../src/check/suite.js';
import type { Tensor } from '../../src/tensor/tensor.js';

/** The inputs' seed of this run: ATTNLAB_TEST_SEED, or time-based. */
export const testSeed = Number(process.env.ATTNLAB_TEST_SEED ?? Date.now() % 1_000_000_000);
/** The random cases' seed: ATTNLAB_TEST_CASES_SEED, or the suite's default draw. */
export const casesSeed = Number(process.env.ATTNLAB_TEST_CASES_SEED ?? RANDOM_CASES_SEED);

export interface BackendSuiteOptions {
  /** Default: the backend's device's cases (suiteCases). */
  readonly cases?: readonly AttentionCase[];
  /** Default: DEVICE_PRECISIONS of the backend's device. */
  readonly precisions?: readonly SuitePrecision[];
  /** Default: testSeed; case i gets seed + 16·i. */
  readonly seed?: number;
  /** Appended to each test's name (e.g. ', tiles 64x64x4'). */
  readonly label?: string;
  /** Runs the validated problem instead of backend.run. */
  readonly run?: (problem: AttentionProblem) => BackendOutput;
  /** Around each run (e.g. setting a knob and restoring it). */
  readonly around?: (run: () => CheckRow) => CheckRow;
  /** Extra assertions on every row that ran (e.g. the variant's form). */
  readonly expect?: (row: CheckRow) => void;
  readonly oracles?: OracleCache;
  /** Reads outputs back asynchronously (checkCaseAsync): a webgpu backend's outputs need it. */
  readonly readback?: 'async';
}

/** The one printout of a seed, for a suite's log (replay with ATTNLAB_TEST_SEED). */
export function seedLine(): string {
  return `# seed ${testSeed} (ATTNLAB_TEST_SEED=${testSeed} replays it), cases seed ${casesSeed}`;
}

/**
 * Registers one test per (case, precision) for `backend`; returns the rows, filled in as the tests
 * run (for an after() hook that looks at them all, e.g. which cases a backend skipped).
 */
export function defineBackendSuite(backend: AttentionBackend, options: BackendSuiteOptions = {}): CheckRow[] {
  const cases = options.cases ?? suiteCases(backend.device, casesSeed);
  const precisions = options.precisions ?? DEVICE_PRECISIONS[backend.device];
  const seed = options.seed ?? testSeed;
  const oracles = options.oracles ?? new OracleCache();
  const around = options.around ?? ((run: () => CheckRow) => run());
  const rows: CheckRow[] = [];
  cases.forEach((c, index) => {
    for (const precision of precisions) {
      it(`${c.name} · ${precision.label}${options.label ?? ''}`, async (t) => {
        const check = { backend, case: c, precision, seed: seed + 16 * index, oracles, run: options.run };
        const row =
          options.readback === 'async' ? await checkCaseAsync(check) : around(() => checkCase(check));
        rows.push(row);
        if (row.status === 'skipped') {
          t.skip(row.reason);
          return;
        }
        assert.equal(row.status, 'pass', describeRow(row));
        options.expect?.(row);
      });
    }
  });
  return rows;
}

/**
 * Asserts a forward result made outside the runner (decode layouts, hand-made masks) passes the
 * suite's comparisons (judgeForward) against the oracle of host `inputs`; disposes the result.
 */
export function assertMatchesOracle(
  result: { readonly output: Tensor; readonly logSumExp?: Tensor },
  inputs: { q: Tensor; k: Tensor; v: Tensor; options: AttentionOptions },
  precision: Precision,
  label: string,
): void {
  try {
    const comparisons = judgeForward(result, inputs, precision);
    const text = comparisons.map((c) => `${c.ok ? '' : 'FAILED '}${c.name}: ${c.message}`).join('; ');
    assert.ok(
      comparisons.every((c) => c.ok),
      `${label} · ${precision}: ${text}`,
    );
  } finally {
    result.output.dispose();
    result.logSumExp?.dispose();
  }
}
