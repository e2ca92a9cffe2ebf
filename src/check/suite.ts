/**
 * The correctness suite, written once: a case (cases.ts) at a precision, run by one backend, judged
 * against the float64 reference with FlashAttention's rule (accuracy.ts), as one row with one
 * printout (describeRow: operation, backend, device, case, precision, seed, variant, every error and
 * its bound). The CPU tests, the GPU tests (test/gpu/<operation>/, one file per backend, through
 * test/support/backend-suite.ts) and `attnlab check` all run `checkCase`; a case a backend cannot run
 * is a skipped row with the backend's own reason (the registry's layout check, then the backend's plan()).
 *
 * Operations: the rows carry an `operation` ('forward' here) and a list of named comparisons, each
 * made by checkAccuracy or checkLogSumExp on a pair of float64 arrays. The gradient suite
 * (gradients.ts: dQuery, dKey, dValue, dBias) and decode checks reuse the case list, the inputs, the
 * comparison and the printout, bringing their own oracle and same-precision baseline.
 */
import { validateAttention } from '../api/validate.js';
import { type AttentionBackend, planFor, runPlanned } from '../backends/backend.js';
import { cpuReferenceBackend } from '../backends/cpu/reference.js';
import type {
  AttentionOptions,
  AttentionProblem,
  BackendOutput,
  Float32Precision,
  Implementation,
} from '../backends/problem.js';
import type { FloatDType } from '../tensor/dtype.js';
import type { Device } from '../tensor/storage.js';
import type { Tensor } from '../tensor/tensor.js';
import { type Modifier, withCaptures } from '../variants/modifiers.js';
import { checkAccuracy, checkLogSumExp, type Precision, plainLowPrecision } from './accuracy.js';
import { type AttentionCase, buildInputs, CASES, LONG_CASES } from './cases.js';
import { RANDOM_CASES_SEED, randomCases } from './random-cases.js';
import { VARIANT_CASES } from './variant-cases.js';

/** A precision the suite runs: the inputs' dtype and, for float32, the products' precision. */
export interface SuitePrecision {
  readonly label: Precision;
  readonly dtype: FloatDType;
  readonly float32Precision?: Float32Precision;
}

export const PRECISIONS = {
  float64: { label: 'float64', dtype: 'float64' },
  float32: { label: 'float32', dtype: 'float32', float32Precision: 'highest' },
  tf32: { label: 'tf32', dtype: 'float32', float32Precision: 'tf32' },
  float16: { label: 'float16', dtype: 'float16' },
  bfloat16: { label: 'bfloat16', dtype: 'bfloat16' },
} as const satisfies Record<string, SuitePrecision>;

/** What each device's backends are checked in (a backend that refuses one skips it, with its reason). */
export const DEVICE_PRECISIONS: Record<Device, readonly SuitePrecision[]> = {
  cpu: [PRECISIONS.float32],
  cuda: [PRECISIONS.bfloat16, PRECISIONS.float16, PRECISIONS.float32, PRECISIONS.tf32],
  // float16 where the adapter has shader-f16; the backend skips it with that reason elsewhere.
  webgpu: [PRECISIONS.float32, PRECISIONS.float16],
};

/** Random cases added to the hand-picked ones (see random-cases.ts). */
export const RANDOM_CASE_COUNT = 20;

/**
 * The cases a device's backends run: the long ones only on the GPU (the CPU backends are JS); the modifier
 * cases on the CPU, whose backends all take them (on the GPU only flash does: test/gpu/variants/cases.test.ts
 * runs them there, so the other backends' suites keep their own refusal checks).
 */
export function suiteCases(device: Device, casesSeed = RANDOM_CASES_SEED): AttentionCase[] {
  const random = randomCases(RANDOM_CASE_COUNT, casesSeed);
  return device === 'cpu' ? [...CASES, ...VARIANT_CASES, ...random] : [...CASES, ...LONG_CASES, ...random];
}

/** One named comparison of a row: what was compared, the verdict, and its message (both errors). */
export interface Comparison {
  readonly name: string;
  readonly ok: boolean;
  readonly error: number;
  readonly bound: number;
  readonly message: string;
}

export interface CheckRow {
  readonly operation: 'forward';
  readonly case: string;
  readonly backend: Implementation;
  readonly device: Device;
  readonly precision: Precision;
  readonly seed: number;
  readonly status: 'pass' | 'fail' | 'skipped';
  readonly variant?: string;
  readonly comparisons: readonly Comparison[];
  /** Why the backend skipped the case, or what its run threw. */
  readonly reason?: string;
}

/** The one printout of a row, the same for every backend, device and operation. */
export function describeRow(row: CheckRow): string {
  const variant = row.variant ? ` · ${row.variant}` : '';
  const head = `${row.operation} ${row.backend} (${row.device}) · ${row.case} · ${row.precision} · seed ${row.seed}${variant}`;
  if (row.status === 'skipped') return `${head}: skipped: ${row.reason}`;
  const parts = row.comparisons.map((c) => `${c.ok ? '' : 'FAILED '}${c.name}: ${c.message}`);
  if (row.reason) parts.push(`threw: ${row.reason}`);
  return `${head}: ${parts.join('; ')}`;
}

interface Inputs {
  readonly q: Tensor;
  readonly k: Tensor;
  readonly v: Tensor;
  readonly options: AttentionOptions;
}

interface Expected {
  readonly output: Float64Array;
  readonly logSumExp: Float64Array;
  readonly baseline: Float64Array;
}

/** A case's host inputs, and their float64 reference and baseline, computed on first use. */
export interface Oracle extends Inputs {
  expected(): Expected;
}

/**
 * The inputs, float64 reference and same-precision baseline of (case, dtype, seed), computed once and
 * shared by every backend and precision that asks (float32 and tf32 share one); the reference only
 * when a backend runs the case, not for skipped rows.
 */
export class OracleCache {
  readonly #byCase = new WeakMap<AttentionCase, Map<string, Oracle>>();

  get(c: AttentionCase, dtype: FloatDType, seed: number): Oracle {
    let forCase = this.#byCase.get(c);
    if (!forCase) this.#byCase.set(c, (forCase = new Map()));
    const key = `${dtype} ${seed}`;
    let oracle = forCase.get(key);
    if (!oracle) forCase.set(key, (oracle = oracleOf(buildInputs(c, dtype, seed), dtype)));
    return oracle;
  }
}

function oracleOf(inputs: Inputs, dtype: FloatDType): Oracle {
  let expected: Expected | undefined;
  return { ...inputs, expected: () => (expected ??= expectedOf(inputs, dtype)) };
}

/** The float64 reference and the same-precision baseline of host inputs of `dtype`. */
function expectedOf(inputs: Inputs, dtype: FloatDType): Expected {
  const { q, k, v, options } = inputs;
  // The reference sees exactly the rounded values the backend sees, widened to float64.
  const wide = (t: Tensor) => t.astype('float64');
  // The reference backend itself, not attention(): this module stays free of the CUDA registry, so
  // the browser entry (src/webgpu.ts) runs the same suite.
  const reference = cpuReferenceBackend.run(
    null,
    validateAttention(wide(q), wide(k), wide(v), {
      ...options,
      bias: options.bias && wide(options.bias),
      implementation: 'reference',
      returnLogSumExp: true,
    }),
  );
  return {
    output: reference.output.toFloat64Array(),
    logSumExp: reference.logSumExp!.toFloat64Array(),
    baseline: plainLowPrecision(q, k, v, options, dtype),
  };
}

export interface CaseCheck {
  readonly backend: AttentionBackend;
  readonly case: AttentionCase;
  readonly precision: SuitePrecision;
  readonly seed: number;
  readonly oracles?: OracleCache;
  /** Runs the validated problem instead of backend.run (e.g. a forced cuDNN graph kind). */
  readonly run?: (problem: AttentionProblem) => BackendOutput;
}

/** Runs one case on one backend at one precision and judges it; never throws for the backend's errors. */
export function checkCase(check: CaseCheck): CheckRow {
  const started = startCase(check);
  if ('status' in started) return started;
  try {
    return started.judge(started.result);
  } finally {
    started.dispose();
  }
}

/**
 * checkCase for a backend whose outputs read back asynchronously (webgpu: mapAsync); also fine
 * for every other backend.
 */
export async function checkCaseAsync(check: CaseCheck): Promise<CheckRow> {
  const started = startCase(check);
  if ('status' in started) return started;
  try {
    const { output, logSumExp } = started.result;
    return started.judge({ output: await output.toHostAsync(), logSumExp: await logSumExp?.toHostAsync() });
  } catch (error) {
    const reason = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
    return { ...started.row, status: 'fail', comparisons: [], reason };
  } finally {
    started.dispose();
  }
}

interface StartedCase {
  readonly row: Omit<CheckRow, 'status' | 'comparisons'>;
  readonly result: BackendOutput;
  judge(result: { readonly output: Tensor; readonly logSumExp?: Tensor }): CheckRow;
  dispose(): void;
}

/** Validates and runs a case: a finished row (skipped, or failed by a throw), or a result to judge. */
function startCase(check: CaseCheck): CheckRow | StartedCase {
  const { backend, precision, seed } = check;
  const oracle = (check.oracles ?? new OracleCache()).get(check.case, precision.dtype, seed);
  const row = {
    operation: 'forward' as const,
    case: check.case.name,
    backend: backend.name,
    device: backend.device,
    precision: precision.label,
    seed,
  };
  const onDevice = backend.device !== 'cpu';
  const move = (t: Tensor | undefined) => (t && onDevice ? t.to(backend.device) : t);
  const owned: Tensor[] = [];
  const own = (t: Tensor | undefined) => {
    const moved = move(t);
    if (moved && onDevice) owned.push(moved);
    return moved;
  };
  const dispose = () => {
    for (const t of owned) t.dispose();
  };
  let started = false;
  try {
    const { scoreMod, maskMod } = oracle.options;
    // Modifiers' captured tensors go to the device with the inputs (variant-cases.ts).
    const moved = <K extends 'scoreMod' | 'maskMod'>(m: Modifier<K> | string | undefined) =>
      typeof m === 'object' && onDevice && m.captures.length > 0
        ? withCaptures(m, (t) => own(t) as Tensor)
        : m;
    const problem = validateAttention(own(oracle.q)!, own(oracle.k)!, own(oracle.v)!, {
      ...oracle.options,
      bias: own(oracle.options.bias),
      mask: own(oracle.options.mask),
      scoreMod: moved(scoreMod),
      maskMod: moved(maskMod),
      implementation: backend.name,
      returnLogSumExp: true,
      float32Precision: precision.float32Precision,
    });
    const found = planFor(backend, problem);
    if (!found.ok) return { ...row, status: 'skipped', comparisons: [], reason: found.reason };
    let result: BackendOutput;
    try {
      result = check.run ? check.run(problem) : runPlanned(backend, found.plan, problem);
    } catch (error) {
      const reason = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
      return { ...row, status: 'fail', comparisons: [], reason };
    }
    if (onDevice) owned.push(result.output, ...(result.logSumExp ? [result.logSumExp] : []));
    const { B, T, N, Hv, dtype } = problem;
    started = true;
    return {
      row,
      result,
      dispose,
      judge: (read) => {
        const comparisons = compareForward(read, oracle, [B, T, N, Hv], dtype, precision.label);
        const ok = comparisons.every((c) => c.ok);
        return { ...row, status: ok ? 'pass' : 'fail', variant: result.variant, comparisons };
      },
    };
  } finally {
    if (!started) dispose();
  }
}

/**
 * The oracle of host inputs (float64 reference and same-precision baseline, computed on first use), for
 * judgeForward to share between results of the same inputs: a decode test judging one cache through six
 * page sizes and four split counts computes one reference, not 24.
 */
export function forwardOracle(inputs: Inputs): Oracle {
  return oracleOf(inputs, inputs.q.dtype as FloatDType);
}

/**
 * A forward result computed outside checkCase (a decode layout, a hand-made mask) judged as a row
 * is: the same oracle, baseline and comparisons, from its host `inputs` of the precision's dtype (or
 * their forwardOracle, to reuse its reference).
 */
export function judgeForward(
  result: { readonly output: Tensor; readonly logSumExp?: Tensor },
  inputs: Inputs | Oracle,
  precision: Precision,
): Comparison[] {
  const dtype = inputs.q.dtype as FloatDType;
  const expected = [...inputs.q.shape.slice(0, -1), inputs.v.shape[inputs.v.rank - 1]];
  const oracle = 'expected' in inputs ? inputs : oracleOf(inputs, dtype);
  return compareForward(result, oracle, expected, dtype, precision);
}

function compareForward(
  result: { readonly output: Tensor; readonly logSumExp?: Tensor },
  oracle: Oracle,
  outputShape: readonly number[],
  dtype: FloatDType,
  precision: Precision,
): Comparison[] {
  const expected = oracle.expected();
  const [shape, wanted] = [result.output.shape.join(','), outputShape.join(',')];
  const output: Comparison =
    shape !== wanted || result.output.dtype !== dtype
      ? {
          name: 'output',
          ok: false,
          error: Number.NaN,
          bound: 0,
          message: `(${shape}) ${result.output.dtype}, expected (${wanted}) ${dtype}`,
        }
      : {
          name: 'output',
          ...checkAccuracy(result.output.toFloat64Array(), expected.output, expected.baseline, precision),
        };
  const lse = result.logSumExp
    ? checkLogSumExp(result.logSumExp.toFloat64Array(), expected.logSumExp, precision)
    : { ok: false, error: Number.NaN, bound: 0, message: 'missing (returnLogSumExp was set)' };
  return [output, { name: 'logSumExp', ...lse }];
}
