/**
 * The correctness suite on the CPU, through the very runner the GPU suites use
 * (test/support/backend-suite.ts → src/check/suite.ts): the CPU flash and reference backends over
 * the hand-picked and random cases. Then the runner itself, with stand-in backends that are wrong
 * on purpose: a perturbed output, a wrong or missing log-sum-exp, a wrong shape, NaN, a throw and a
 * refusal must each give the row (and the one printout) they should. And the case lists: every GPU
 * case builds valid inputs, names are unique, the random draw is reproducible and varied.
 */
import assert from 'node:assert/strict';
import { before, describe, it } from 'node:test';
import { attention } from '../../../src/api/attention.js';
import { validateAttention } from '../../../src/api/validate.js';
import { type AttentionBackend, unsupported } from '../../../src/backends/backend.js';
import { cpuFlashBackend } from '../../../src/backends/cpu/flash.js';
import { cpuReferenceBackend } from '../../../src/backends/cpu/reference.js';
import type { BackendOutput } from '../../../src/backends/problem.js';
import { type AttentionCase, buildInputs, CASES, LONG_CASES } from '../../../src/check/cases.js';
import { RANDOM_CASES_SEED, randomCases } from '../../../src/check/random-cases.js';
import { runCheck } from '../../../src/check/run-check.js';
import {
  checkCase,
  describeRow,
  forwardOracle,
  judgeForward,
  PRECISIONS,
  RANDOM_CASE_COUNT,
  type SuitePrecision,
  suiteCases,
} from '../../../src/check/suite.js';
import { VARIANT_CASES } from '../../../src/check/variant-cases.js';
import { Tensor } from '../../../src/tensor/tensor.js';
import { assertMatchesOracle, defineBackendSuite, seedLine } from '../../support/backend-suite.js';

// The CPU backends compute in float64 whatever the dtype, so one precision each covers them; the
// GPU precisions' baselines (bfloat16 here, float16 and float32 in the runner tests) run too.
describe('suite: cpu flash', () => {
  before(() => console.log(seedLine()));
  defineBackendSuite(cpuFlashBackend);
});

describe('suite: cpu reference', () => {
  defineBackendSuite(cpuReferenceBackend, {
    cases: suiteCases('cpu').filter((x) => x.name.startsWith('random')),
    precisions: [PRECISIONS.bfloat16],
  });
});

/** cpu flash with its output or log-sum-exp changed by `spoil`. */
function spoiled(spoil: (out: BackendOutput) => BackendOutput): AttentionBackend {
  return { ...cpuFlashBackend, run: (plan, p) => spoil(cpuFlashBackend.run(plan, p)) };
}

const scaled = (t: Tensor, f: (x: number, i: number) => number) =>
  Tensor.fromArray(Array.from(t.toFloat64Array(), f), t.shape, t.dtype);

describe('suite runner, with backends wrong on purpose', () => {
  const c = CASES.find((x) => x.name === 'GQA N=8 K=2')!;
  const check = (backend: AttentionBackend, precision: SuitePrecision = PRECISIONS.bfloat16, which = c) =>
    checkCase({ backend, case: which, precision, seed: 5 });

  it('passes the real backend, and prints both errors, case, backend, precision, seed and variant', () => {
    const row = check(cpuFlashBackend);
    assert.equal(row.status, 'pass', describeRow(row));
    assert.deepEqual(
      row.comparisons.map((x) => x.name),
      ['output', 'logSumExp'],
    );
    assert.match(
      describeRow(row),
      /^forward flash \(cpu\) · GQA N=8 K=2 · bfloat16 · seed 5 · cpu-flash-f64-\S+: output: max\|err\| \S+ vs bound \S+ \(2 × plain bfloat16 error \S+ \+ \S+\); logSumExp: lse rel err/,
    );
  });

  it('fails an output off by a few bf16 ulps, naming the output', () => {
    const row = check(
      spoiled((o) => ({ ...o, output: scaled(o.output, (x, i) => (i === 7 ? x + 0.05 : x)) })),
    );
    assert.equal(row.status, 'fail');
    assert.match(describeRow(row), /FAILED output: max\|err\| 5\.\d+e-2 vs bound/);
  });

  it('fails a log-sum-exp off by 1e-2, or missing', () => {
    const off = check(
      spoiled((o) => ({ ...o, logSumExp: o.logSumExp && scaled(o.logSumExp, (x) => x + 1e-2) })),
    );
    assert.equal(off.status, 'fail');
    assert.match(describeRow(off), /FAILED logSumExp: lse rel err/);
    const missing = check(spoiled((o) => ({ ...o, logSumExp: undefined })));
    assert.match(describeRow(missing), /FAILED logSumExp: missing/);
  });

  it('fails −inf where a row sees keys (and a finite value where it sees none)', () => {
    const empty = CASES.find((x) => x.name.startsWith('mask'))!;
    const row = check(
      spoiled((o) => ({
        ...o,
        logSumExp: o.logSumExp && scaled(o.logSumExp, (x) => (Number.isFinite(x) ? x : 0)),
      })),
      PRECISIONS.float32,
      empty,
    );
    assert.equal(row.status, 'fail');
    assert.match(describeRow(row), /row \d+: 0, expected -Infinity/);
  });

  it('fails NaN (an element a kernel forgot to write reads as poison) and a wrong shape or dtype', () => {
    const nan = check(
      spoiled((o) => ({ ...o, output: scaled(o.output, (x, i) => (i === 3 ? Number.NaN : x)) })),
    );
    assert.equal(nan.status, 'fail');
    const dtype = check(spoiled((o) => ({ ...o, output: o.output.astype('float32') })));
    assert.match(describeRow(dtype), /FAILED output: \(2,64,8,64\) float32, expected \(2,64,8,64\) bfloat16/);
  });

  it('turns a throw into a failing row with the error, and a refusal into a skip with the reason', () => {
    const throwing = check({
      ...cpuFlashBackend,
      run: () => {
        throw new RangeError('kernel exploded');
      },
    });
    assert.equal(throwing.status, 'fail');
    assert.match(describeRow(throwing), /threw: RangeError: kernel exploded/);
    const refusing = check({ ...cpuFlashBackend, plan: () => unsupported('no GQA here') });
    assert.equal(refusing.status, 'skipped');
    assert.match(describeRow(refusing), /: skipped: no GQA here$/);
  });
});

describe('judging a result made outside the runner (decode layouts, hand-made masks)', () => {
  it('passes a right result and fails a spoiled one, rank 3 and 4, with the same comparisons', () => {
    const c = CASES.find((x) => x.name === 'padding lengths')!;
    const inputs = buildInputs(c, 'float16', 9);
    const run = () => attention(inputs.q, inputs.k, inputs.v, { ...inputs.options, returnLogSumExp: true });
    assert.doesNotThrow(() => assertMatchesOracle(run(), inputs, 'float16', 'right'));
    const r = run();
    const wrong = { ...r, output: scaled(r.output, (x, i) => (i === 0 ? x + 0.1 : x)) };
    assert.throws(
      () => assertMatchesOracle(wrong, inputs, 'float16', 'spoiled'),
      /spoiled · float16: FAILED output/,
    );
    const t = CASES.find((x) => x.name === 'T=1')!;
    const one = buildInputs({ ...t, shape: { ...t.shape, B: 1 } }, 'float32', 4);
    const [q, k, v] = [one.q, one.k, one.v].map((x) => x.reshape(x.shape.slice(1)));
    const rank3 = attention(q, k, v, { returnLogSumExp: true });
    const comparisons = judgeForward(rank3, { q, k, v, options: {} }, 'float32');
    assert.ok(
      comparisons.every((x) => x.ok),
      comparisons.map((x) => x.message).join('; '),
    );
  });

  it('shares one reference between results of the same inputs (forwardOracle, and by content in assertMatchesOracle)', () => {
    const c = CASES.find((x) => x.name === 'padding lengths')!;
    const inputs = buildInputs(c, 'bfloat16', 11);
    const run = () => attention(inputs.q, inputs.k, inputs.v, { ...inputs.options, returnLogSumExp: true });
    const oracle = forwardOracle(inputs);
    assert.equal(oracle.expected(), oracle.expected(), 'computed once');
    const r = run();
    const messages = (x: ReturnType<typeof judgeForward>) => x.map((m) => m.message);
    assert.deepEqual(
      messages(judgeForward(r, oracle, 'bfloat16')),
      messages(judgeForward(r, inputs, 'bfloat16')),
    );
    // Inputs built anew from the same seed share the oracle; a spoiled result still fails against it, and
    // inputs of another seed get their own (a right result of theirs passes).
    assert.doesNotThrow(() =>
      assertMatchesOracle(run(), buildInputs(c, 'bfloat16', 11), 'bfloat16', 'again'),
    );
    const wrong = { ...r, output: scaled(r.output, (x, i) => (i === 0 ? x + 0.1 : x)) };
    assert.throws(
      () => assertMatchesOracle(wrong, buildInputs(c, 'bfloat16', 11), 'bfloat16', 'spoiled'),
      /FAILED output/,
    );
    const other = buildInputs(c, 'bfloat16', 12);
    const theirs = attention(other.q, other.k, other.v, { ...other.options, returnLogSumExp: true });
    assert.doesNotThrow(() => assertMatchesOracle(theirs, other, 'bfloat16', 'other seed'));
    assert.throws(() => assertMatchesOracle(run(), other, 'bfloat16', 'mixed up'), /FAILED output/);
  });
});

describe('suite cases', () => {
  it('every case of every device builds inputs the API validates, with unique names', () => {
    const all = [...suiteCases('cuda'), ...VARIANT_CASES];
    assert.equal(all.length, CASES.length + LONG_CASES.length + RANDOM_CASE_COUNT + VARIANT_CASES.length);
    assert.equal(suiteCases('cpu').length, CASES.length + VARIANT_CASES.length + RANDOM_CASE_COUNT);
    assert.equal(new Set(all.map((x) => x.name)).size, all.length, 'case names are unique');
    for (const c of all) {
      const { q, k, v, options } = buildInputs(c, 'float32', 1);
      assert.doesNotThrow(() => validateAttention(q, k, v, options), c.name);
    }
  });

  it('the random draw is reproducible, another seed draws others, and it covers every feature', () => {
    assert.deepEqual(randomCases(8, 99), randomCases(8, 99));
    assert.notDeepEqual(
      randomCases(8, 99).map((x) => x.name),
      randomCases(8, 100).map((x) => x.name),
    );
    const draw = randomCases(RANDOM_CASE_COUNT, RANDOM_CASES_SEED);
    const has = (f: (x: AttentionCase) => unknown) => draw.some(f);
    assert.ok(has((x) => x.options?.isCausal));
    assert.ok(has((x) => x.options?.causalAlignment === 'bottom_right'));
    assert.ok(has((x) => x.options?.localWindowSize));
    assert.ok(has((x) => x.options?.keyValueSeqLengths));
    assert.ok(has((x) => x.biasShape));
    assert.ok(has((x) => x.maskShape));
    assert.ok(has((x) => x.shape.N > x.shape.K));
    assert.ok(has((x) => x.shape.T === 1));
  });
});

describe('attnlab check runs the suite', () => {
  it('gives the rows the tests give: cpu flash over the CPU cases, all passing', () => {
    const rows = runCheck({ devices: ['cpu'], seed: 3, filter: (x) => x.name.includes('window') });
    assert.ok(rows.length > 0);
    for (const row of rows) {
      assert.equal(row.backend, 'flash');
      assert.equal(row.status, 'pass', describeRow(row));
    }
  });
});
