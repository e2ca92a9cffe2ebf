/**
 * The cuDNN backend through the correctness suite (src/check/suite.ts, run by
 * test/support/backend-suite.ts): every case cuDNN takes (boolean masks and biases broadcast over T
 * or S converted on the device, rows that see no key fixed up after it), in bfloat16 and float16, against the
 * float64 reference (float32 and tf32 are skipped with cuDNN's reason), both graph kinds and both
 * log-sum-exp layouts on the cases that exercise layout, that the hand-picked cases it cannot run are
 * skipped for the right reason, and every "cannot run" error. The plan cache has its own file,
 * cudnn-plan-cache.test.ts.
 */
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { attention } from '../../../src/api/attention.js';
import { validateAttention } from '../../../src/api/validate.js';
import {
  cudnnBackend,
  cudnnEnvironment,
  runCudnnAttention,
} from '../../../src/backends/cuda/cudnn/backend.js';
import type { DescribeOptions } from '../../../src/backends/cuda/cudnn/features.js';
import { planCacheStats } from '../../../src/backends/cuda/cudnn/plan-cache.js';
import { loadCudnn } from '../../../src/backends/cuda/ffi/cudnn.js';
import { CUDNN_UNIFIED_SEQ_LEN_VERSION } from '../../../src/backends/cuda/ffi/cudnn-constants.js';
import { cudaAvailable } from '../../../src/backends/cuda/runtime/context.js';
import { setAllocationPoison } from '../../../src/backends/cuda/runtime/memory.js';
import type { AttentionOptions } from '../../../src/backends/problem.js';
import { type AttentionCase, buildInputs, CASES, LONG_CASES } from '../../../src/check/cases.js';
import { type CheckRow, OracleCache, PRECISIONS } from '../../../src/check/suite.js';
import { reloadConfig } from '../../../src/config.js';
import { UnsupportedError } from '../../../src/errors.js';
import type { FloatDType } from '../../../src/tensor/dtype.js';
import { randomNormal } from '../../../src/tensor/random.js';
import { defineBackendSuite, testSeed as seed, seedLine } from '../../support/backend-suite.js';

/** The problem of a case with its inputs, bias and mask on the GPU. */
function deviceProblem(c: AttentionCase, dtype: FloatDType, caseSeed: number, extra: AttentionOptions = {}) {
  const { q, k, v, options } = buildInputs(c, dtype, caseSeed);
  const onDevice = { ...options, ...extra, bias: options.bias?.to('cuda'), mask: options.mask?.to('cuda') };
  return validateAttention(q.to('cuda'), k.to('cuda'), v.to('cuda'), onDevice);
}

const cuda = cudaAvailable();
const skip = cuda.ok ? false : `no CUDA device: ${cuda.reason}`;
// Plans of this run go to a fresh folder, not the user's cache.
process.env.ATTNLAB_CACHE_DIR = mkdtempSync(join(tmpdir(), 'attnlab-cudnn-'));
reloadConfig();

/** Cases cuDNN refuses, and the words of the reason (none today: masks, broadcast biases, empty
 * rows and bottom-right bounds beside a bias all run). */
const REFUSED: Record<string, RegExp> = {};

describe('cudnn backend', { skip }, () => {
  const variants = new Set<string>();
  const collect = (row: CheckRow) => {
    assert.match(row.variant ?? '', /^cudnn \d+\.\d+\.\d+ (unified|composite) engine -?\d+ /);
    variants.add(row.variant!);
  };
  before(() => {
    const e = cudnnEnvironment();
    console.log(
      `${seedLine()}; cuDNN ${loadCudnn().description}; ${e.ok ? `GPU ${e.env.gpuName}` : e.reason}`,
    );
    setAllocationPoison(0xff);
  });
  after(() => {
    setAllocationPoison(null);
    console.log(`# variants that ran:\n#   ${[...variants].sort().join('\n#   ')}`);
    console.log(`# plan cache: ${JSON.stringify(planCacheStats())}`);
  });

  const oracles = new OracleCache();
  const rows = defineBackendSuite(cudnnBackend, { oracles, expect: collect });

  it('skipped the cases it cannot run, for the reason it gives, and float32', () => {
    for (const [name, words] of Object.entries(REFUSED)) {
      for (const precision of ['bfloat16', 'float16']) {
        const row = rows.find((r) => r.case === name && r.precision === precision);
        assert.equal(row?.status, 'skipped', `${name} ${precision}: ${row?.status}`);
        assert.match(row?.reason ?? '', words, name);
      }
    }
    for (const row of rows.filter((r) => r.precision === 'float32' || r.precision === 'tf32')) {
      assert.equal(row.status, 'skipped');
      assert.match(row.reason ?? '', /float16 or bfloat16 inputs, got float32/);
    }
  });

  // Both graph kinds and both log-sum-exp layouts, on the non-causal cases that exercise layout:
  // MHA, GQA, MQA, padding (unified takes sequence lengths from 9.15), T ≠ S.
  const layoutCases = [...CASES, ...LONG_CASES].filter((x) =>
    ['MHA', 'GQA N=8 K=2', 'MQA N=8 K=1', 'padding lengths', 'T=113 S=203'].includes(x.name),
  );
  const forced: DescribeOptions[] = [
    { graph: 'composite', statsLayout: 'bnt' },
    { graph: 'unified', statsLayout: 'btn' },
    { graph: 'unified', statsLayout: 'bnt' },
  ];
  // The unified op takes sequence lengths from cuDNN 9.15 (attributes 2809/2810): before, a refusal.
  const e = cudnnEnvironment();
  const oldUnified = e.ok && e.env.version < CUDNN_UNIFIED_SEQ_LEN_VERSION;
  const padded = (c: AttentionCase) =>
    c.options?.querySeqLengths !== undefined || c.options?.keyValueSeqLengths !== undefined;
  for (const how of forced) {
    const refused = how.graph === 'unified' && oldUnified;
    defineBackendSuite(cudnnBackend, {
      cases: layoutCases.filter((c) => !(refused && padded(c))),
      precisions: [PRECISIONS.bfloat16],
      label: ` through the ${how.graph} graph, lse ${how.statsLayout}`,
      run: (p) => runCudnnAttention(p, how),
      oracles,
      expect: (row) => {
        collect(row);
        assert.match(row.variant!, new RegExp(`^cudnn \\S+ ${how.graph} `));
      },
    });
    if (!refused) continue;
    for (const c of layoutCases.filter(padded)) {
      it(`${c.name} through the unified graph: refused before cuDNN 9.15`, () => {
        const p = deviceProblem(c, 'bfloat16', seed + 1, { implementation: 'cudnn' });
        assert.throws(() => runCudnnAttention(p, how), /before 9\.15/);
      });
    }
  }

  it('is chosen by auto dispatch for bfloat16 on the GPU', () => {
    const q = randomNormal([2, 64, 4, 64], { seed, dtype: 'bfloat16' }).to('cuda');
    assert.equal(attention(q, q, q, { isCausal: true }).backend, 'cudnn');
  });

  it('refuses what it cannot run, naming the reason', () => {
    const refuse = (dtype: FloatDType, H: number, options: AttentionOptions, pattern: RegExp) => {
      const x = randomNormal([1, 16, 2, H], { seed, dtype }).to('cuda');
      assert.throws(
        () => attention(x, x, x, { ...options, implementation: 'cudnn' }),
        (e: unknown) => e instanceof UnsupportedError && pattern.test(e.message),
      );
    };
    refuse('float32', 64, {}, /float16 or bfloat16 inputs, got float32/);
    refuse('bfloat16', 36, {}, /multiples of 8 and at most 256, got H=36/);
    refuse('bfloat16', 264, {}, /got H=264/);
    const bias = randomNormal([1, 2, 16, 16], { seed, dtype: 'float32' }).to('cuda');
    refuse('bfloat16', 64, { bias }, /bias must have the inputs' dtype/);
  });

  // Last: a kernel that faults on these rows would spoil the CUDA context for every later test.
  it('rows that see no key: zeros and lse −inf after the fix-up, which leaves every other row as cuDNN wrote it', () => {
    const c: AttentionCase = { name: 'probe', shape: { B: 2, T: 64, S: 64, N: 2, K: 2, H: 64 }, options: {} };
    // [name, options, the first row of batch 1 that sees a key, the first past its query length]
    const probes: [string, AttentionOptions, number, number][] = [
      [
        'bottom-right causal, T_b > S_b',
        {
          isCausal: true,
          causalAlignment: 'bottom_right',
          querySeqLengths: [64, 40],
          keyValueSeqLengths: [64, 20],
        },
        20, // row t sees keys up to t − (40 − 20)
        40,
      ],
      ['S_b = 0', { querySeqLengths: [64, 30], keyValueSeqLengths: [64, 0] }, 30, 30],
    ];
    const { T, N, H } = c.shape;
    const rowOf = (values: Float64Array, b: number, t: number) =>
      values.subarray((b * T + t) * N * H, (b * T + t + 1) * N * H);
    for (const [name, options, firstSeen, queryLength] of probes) {
      const p = deviceProblem({ ...c, options }, 'bfloat16', seed, { returnLogSumExp: true });
      const fixed = runCudnnAttention(p);
      const o = fixed.output.toFloat64Array();
      const lse = fixed.logSumExp!.toFloat64Array();
      for (let t = 0; t < firstSeen; t++) {
        assert.ok(
          rowOf(o, 1, t).every((x) => x === 0),
          `${name}: batch 1 row ${t} sees no key, its output must be zeros`,
        );
        for (let n = 0; n < N; n++) assert.equal(lse[(T + t) * N + n], -Infinity, `${name}: lse of row ${t}`);
      }
      let raw: ReturnType<typeof runCudnnAttention>;
      try {
        raw = runCudnnAttention(p, { rawEmptyRows: true });
      } catch (error) {
        // A refusal must be typed and say why; anything else is a bug.
        assert.ok(error instanceof UnsupportedError, String(error));
        console.log(`# PROBE ${name}: ${error.message}`);
        continue;
      }
      const r = raw.output.toFloat64Array();
      const first = rowOf(r, 1, 0);
      const kind = first.every((x) => x === 0)
        ? 'zeros'
        : first.some(Number.isNaN)
          ? 'NaN'
          : `values like ${first[0]}`;
      console.log(`# PROBE ${name}: cuDNN itself writes ${kind} in batch 1 row 0`);
      // The fix-up writes only the rows that see nothing: batch 0 and batch 1's seen rows are cuDNN's, bit for bit.
      const seen = [
        ...Array.from({ length: T }, (_, t) => [0, t]),
        ...Array.from({ length: queryLength - firstSeen }, (_, i) => [1, firstSeen + i]),
      ];
      for (const [b, t] of seen) {
        assert.deepEqual(
          rowOf(r, b, t),
          rowOf(o, b, t),
          `${name}: batch ${b} row ${t} changed by the fix-up`,
        );
      }
      for (const x of [fixed.output, fixed.logSumExp!, raw.output, raw.logSumExp]) x?.dispose();
    }
  });
});
