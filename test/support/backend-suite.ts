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
import { createHash } from 'node:crypto';
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
  forwardOracle,
  judgeForward,
  type Oracle,
  OracleCache,
  type SuitePrecision,
  suiteCases,
} from '../../src/check/suite.js';
import { Tensor } from '../../src/tensor/tensor.js';

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

type HostInputs = { q: Tensor; k: Tensor; v: Tensor; options: AttentionOptions };

/**
 * The oracles of the last inputs judged, by content: the decode suites judge one cache through up to six
 * page sizes, four split counts and three kernel forms, each time with inputs built anew from the same seed;
 * each float64 reference (up to 1.1e9 multiply-adds at B=8 S=16384 N=32) is then computed once. Eight entries
 * bound the memory (inputs and results of the largest, ~70 MB).
 */
const recentOracles = new Map<string, Oracle>();

/** A digest of the inputs' dtypes, shapes, values and options; undefined when an option is not plain data. */
function contentKey(inputs: HostInputs): string | undefined {
  const hash = createHash('sha1');
  const addTensor = (t: Tensor) => {
    const data = t.to('cpu').data;
    hash.update(`${t.dtype}(${t.shape.join(',')})`);
    hash.update(new Uint8Array(data.buffer, data.byteOffset, data.byteLength));
  };
  for (const t of [inputs.q, inputs.k, inputs.v]) addTensor(t);
  for (const [name, value] of Object.entries(inputs.options).sort(([a], [b]) => a.localeCompare(b))) {
    hash.update(`|${name}=`);
    if (value instanceof Tensor) addTensor(value);
    else if (value === undefined || ['number', 'boolean', 'string'].includes(typeof value))
      hash.update(String(value));
    else if (Array.isArray(value) || ArrayBuffer.isView(value))
      hash.update(JSON.stringify(Array.from(value as ArrayLike<unknown>)));
    else return undefined; // a modifier or block mask: judged without sharing
  }
  return hash.digest('hex');
}

/** forwardOracle of `inputs`, shared with earlier inputs of the same content. */
function sharedOracle(inputs: HostInputs): Oracle {
  const key = contentKey(inputs);
  if (key === undefined) return forwardOracle(inputs);
  let oracle = recentOracles.get(key);
  if (oracle) recentOracles.delete(key);
  else oracle = forwardOracle(inputs);
  recentOracles.set(key, oracle); // most recent last
  if (recentOracles.size > 8) recentOracles.delete(recentOracles.keys().next().value as string);
  return oracle;
}

/**
 * Asserts a forward result made outside the runner (decode layouts, hand-made masks) passes the
 * suite's comparisons (judgeForward) against the oracle of host `inputs` (computed once for inputs of the
 * same content); disposes the result.
 */
export function assertMatchesOracle(
  result: { readonly output: Tensor; readonly logSumExp?: Tensor },
  inputs: HostInputs,
  precision: Precision,
  label: string,
): void {
  try {
    const comparisons = judgeForward(result, sharedOracle(inputs), precision);
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
