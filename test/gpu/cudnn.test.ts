/**
 * The cuDNN backend on the GPU: the shared correctness matrix (float16 and bfloat16) and extra
 * multi-tile cases against the float64 CPU reference, both graph kinds, both log-sum-exp layouts,
 * and every "cannot run" case. The plan cache has its own file, cudnn-cache.test.ts.
 */
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { attention } from '../../src/api/attention.js';
import { validateAttention } from '../../src/api/validate.js';
import { cudaAvailable } from '../../src/backends/cuda/context.js';
import { cudnnEnvironment, runCudnnAttention } from '../../src/backends/cuda/cudnn/backend.js';
import type { DescribeOptions } from '../../src/backends/cuda/cudnn/features.js';
import { planCacheStats } from '../../src/backends/cuda/cudnn/plan-cache.js';
import { loadCudnn } from '../../src/backends/cuda/ffi/cudnn.js';
import { CUDNN_UNIFIED_SEQ_LEN_VERSION } from '../../src/backends/cuda/ffi/cudnn-constants.js';
import { setAllocationPoison } from '../../src/backends/cuda/memory.js';
import type { AttentionOptions } from '../../src/backends/problem.js';
import { reloadConfig } from '../../src/config.js';
import { UnsupportedError } from '../../src/errors.js';
import type { FloatDType } from '../../src/tensor/dtype.js';
import { randomNormal } from '../../src/tensor/random.js';
import { Tensor } from '../../src/tensor/tensor.js';
import { type AttentionCase, buildInputs, CASES, WINDOW_CASES } from '../support/cases.js';
import { checkAgainstOracle } from '../support/oracle.js';

/** The case's inputs, bias and mask on the GPU. */
function deviceInputs(c: AttentionCase, dtype: FloatDType, seed: number, extra: AttentionOptions = {}) {
  const { q, k, v, options } = buildInputs(c, dtype, seed);
  const onDevice = { ...options, ...extra, bias: options.bias?.to('cuda'), mask: options.mask?.to('cuda') };
  return { q: q.to('cuda'), k: k.to('cuda'), v: v.to('cuda'), options: onDevice };
}

function deviceProblem(c: AttentionCase, dtype: FloatDType, seed: number, extra: AttentionOptions = {}) {
  const { q, k, v, options } = deviceInputs(c, dtype, seed, extra);
  return validateAttention(q, k, v, options);
}

const cuda = cudaAvailable();
const skip = cuda.ok ? false : `no CUDA device: ${cuda.reason}`;
const seed = Number(process.env.ATTNLAB_TEST_SEED ?? Date.now() % 1_000_000_000);
// Plans of this run go to a fresh folder, not the user's cache.
process.env.ATTNLAB_CACHE_DIR = mkdtempSync(join(tmpdir(), 'attnlab-cudnn-'));
reloadConfig();

const CUDNN_CASES: readonly AttentionCase[] = [
  {
    name: 'T=S=384 causal (several tiles)',
    shape: { B: 1, T: 384, S: 384, N: 2, K: 1, H: 128 },
    options: { isCausal: true },
  },
  {
    name: 'T=200 S=384 bottom-right causal',
    shape: { B: 1, T: 200, S: 384, N: 2, K: 2, H: 64 },
    options: { isCausal: true, causalAlignment: 'bottom_right' },
  },
  ...WINDOW_CASES,
  {
    name: 'padding, no mask ops on 9.15+ (unified)',
    shape: { B: 3, T: 200, S: 250, N: 4, K: 1, H: 64 },
    options: { querySeqLengths: [200, 1, 77], keyValueSeqLengths: [9, 250, 130] },
  },
  {
    name: 'bias (B,N,T,S) T=150 S=300',
    shape: { B: 2, T: 150, S: 300, N: 2, K: 2, H: 64 },
    biasShape: [2, 2, 150, 300],
  },
  // Boolean masks, converted to a bias on the device; row 0 of each mask sees nothing (cases.ts).
  {
    name: 'mask (1,1,T,S) causal T=S=200',
    shape: { B: 2, T: 200, S: 200, N: 2, K: 1, H: 64 },
    maskShape: [1, 1, 200, 200],
    options: { isCausal: true },
  },
  {
    name: 'mask (B,N,T,S) + padding',
    shape: { B: 2, T: 130, S: 260, N: 2, K: 2, H: 128 },
    maskShape: [2, 2, 130, 260],
    options: { querySeqLengths: [130, 61], keyValueSeqLengths: [200, 260] },
  },
  {
    name: 'mask (B,1,T,S) + bias (1,N,T,S)',
    shape: { B: 2, T: 150, S: 300, N: 2, K: 2, H: 64 },
    maskShape: [2, 1, 150, 300],
    biasShape: [1, 2, 150, 300],
  },
  {
    name: 'mask (1,1,1,S): every row masked',
    shape: { B: 1, T: 40, S: 70, N: 2, K: 2, H: 64 },
    maskShape: [1, 1, 1, 70],
  },
  {
    name: 'mask (B,1,T,1) + causal + window',
    shape: { B: 2, T: 96, S: 96, N: 2, K: 2, H: 64 },
    maskShape: [2, 1, 96, 1],
    options: { isCausal: true, localWindowSize: [20, 0] },
  },
  // A bottom-right right bound beside a mask or bias is applied by the bias conversion instead.
  {
    name: 'bias (B,1,T,S) + bottom-right window [6,1] + padding',
    shape: { B: 2, T: 100, S: 160, N: 2, K: 2, H: 64 },
    biasShape: [2, 1, 100, 160],
    options: {
      localWindowSize: [6, 1],
      causalAlignment: 'bottom_right',
      querySeqLengths: [100, 70],
      keyValueSeqLengths: [40, 160],
    },
  },
  {
    name: 'mask + bottom-right causal T<S',
    shape: { B: 1, T: 48, S: 80, N: 2, K: 2, H: 64 },
    maskShape: [1, 1, 48, 80],
    options: { isCausal: true, causalAlignment: 'bottom_right' },
  },
  // Biases broadcast over T or S, expanded on the device.
  { name: 'bias (B,N,T,1)', shape: { B: 2, T: 70, S: 90, N: 2, K: 2, H: 64 }, biasShape: [2, 2, 70, 1] },
  {
    name: 'bias (1,1,1,S) causal',
    shape: { B: 2, T: 200, S: 200, N: 2, K: 2, H: 64 },
    biasShape: [1, 1, 1, 200],
    options: { isCausal: true },
  },
  // T > S through full sequence lengths; rows that see nothing fixed up after cuDNN.
  {
    name: 'window [5,0] T>S (last rows see nothing)',
    shape: { B: 2, T: 80, S: 48, N: 2, K: 2, H: 64 },
    options: { localWindowSize: [5, 0] },
  },
  {
    name: 'window [3,2] bottom-right T>S',
    shape: { B: 2, T: 80, S: 48, N: 2, K: 1, H: 64 },
    options: { localWindowSize: [3, 2], causalAlignment: 'bottom_right' },
  },
  {
    name: 'S_b = 0 in one batch',
    shape: { B: 2, T: 64, S: 64, N: 2, K: 2, H: 64 },
    options: { querySeqLengths: [64, 30], keyValueSeqLengths: [64, 0] },
  },
  {
    name: 'H=256 causal GQA',
    shape: { B: 1, T: 200, S: 200, N: 4, K: 2, H: 256 },
    options: { isCausal: true },
  },
];

function runCase(c: AttentionCase, dtype: FloatDType, caseSeed: number, how: DescribeOptions | null): string {
  const inputs = buildInputs(c, dtype, caseSeed);
  const p = deviceProblem(c, dtype, caseSeed, { returnLogSumExp: true, implementation: 'cudnn' });
  const result = how
    ? runCudnnAttention(p, how)
    : attention(p.query, p.key, p.value, {
        ...inputs.options,
        bias: p.bias?.tensor,
        mask: p.mask?.tensor,
        implementation: 'cudnn',
        returnLogSumExp: true,
      });
  assert.match(result.variant, /^cudnn \d+\.\d+\.\d+ (unified|composite) engine -?\d+ /);
  const variant = result.variant;
  // cuDNN's statistics are float32 sums: within 1e-4 of the float64 log-sum-exp.
  checkAgainstOracle(result, inputs, dtype, `${c.name} ${dtype} (seed ${caseSeed}, ${variant})`, 1e-4);
  return variant;
}

describe('cudnn backend', { skip }, () => {
  const variants = new Set<string>();
  before(() => {
    const e = cudnnEnvironment();
    console.log(
      `# seed ${seed}; cuDNN ${loadCudnn().description}; ${e.ok ? `GPU ${e.env.gpuName}` : e.reason}`,
    );
    setAllocationPoison(0xff);
  });
  after(() => {
    setAllocationPoison(null);
    console.log(`# variants that ran:\n#   ${[...variants].sort().join('\n#   ')}`);
    console.log(`# plan cache: ${JSON.stringify(planCacheStats())}`);
  });

  for (const dtype of ['bfloat16', 'float16'] as const) {
    [...CASES, ...CUDNN_CASES].forEach((c, index) => {
      it(`${c.name} (${dtype})`, () => {
        variants.add(runCase(c, dtype, seed + 16 * index, null));
      });
    });
  }

  // Both graph kinds and both log-sum-exp layouts, on the non-causal cases that exercise layout:
  // MHA, GQA, MQA, padding (unified takes sequence lengths from 9.15), T ≠ S.
  const plain = [...CASES, ...CUDNN_CASES].filter((x) =>
    ['MHA', 'GQA N=8 K=2', 'MQA N=8 K=1', 'padding lengths', 'T=113 S=203'].includes(x.name),
  );
  const forced: DescribeOptions[] = [
    { graph: 'composite', statsLayout: 'bnt' },
    { graph: 'unified', statsLayout: 'btn' },
    { graph: 'unified', statsLayout: 'bnt' },
  ];
  for (const c of plain) {
    for (const how of forced) {
      it(`${c.name} through the ${how.graph} graph, lse ${how.statsLayout}`, () => {
        // The unified op takes sequence lengths from cuDNN 9.15 (attributes 2809/2810): before, a refusal.
        const e = cudnnEnvironment();
        const padded =
          c.options?.querySeqLengths !== undefined || c.options?.keyValueSeqLengths !== undefined;
        if (how.graph === 'unified' && padded && e.ok && e.env.version < CUDNN_UNIFIED_SEQ_LEN_VERSION) {
          const p = deviceProblem(c, 'bfloat16', seed + 1, { implementation: 'cudnn' });
          assert.throws(() => runCudnnAttention(p, how), /before 9\.15/);
          return;
        }
        variants.add(runCase(c, 'bfloat16', seed + 1, how));
      });
    }
  }

  // A mask that drops the first 256 keys of every even row: whole key tiles are masked before the
  // row's first visible key, so the running max starts at the fill value and must rescale away.
  for (const dtype of ['bfloat16', 'float16'] as const) {
    it(`masked key tiles before the first visible key are exact (${dtype})`, () => {
      const c: AttentionCase = { name: 'late keys', shape: { B: 1, T: 128, S: 384, N: 2, K: 2, H: 64 } };
      const inputs = buildInputs(c, dtype, seed);
      const values = new Uint8Array(128 * 384).fill(1);
      for (let t = 0; t < 128; t += 2) values.fill(0, t * 384, t * 384 + 256);
      const mask = Tensor.fromRaw(values, [1, 1, 128, 384], 'bool');
      const withMask = { ...inputs, options: { ...inputs.options, mask } };
      const result = attention(inputs.q.to('cuda'), inputs.k.to('cuda'), inputs.v.to('cuda'), {
        mask: mask.to('cuda'),
        implementation: 'cudnn',
        returnLogSumExp: true,
      });
      checkAgainstOracle(result, withMask, dtype, `late keys ${dtype} (seed ${seed})`, 1e-4);
    });
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
  it('probes rows that see no key, left raw: what cuDNN itself writes there', () => {
    const c: AttentionCase = { name: 'probe', shape: { B: 2, T: 64, S: 64, N: 2, K: 2, H: 64 }, options: {} };
    const probes: [string, AttentionOptions][] = [
      [
        'bottom-right causal, T_b > S_b',
        {
          isCausal: true,
          causalAlignment: 'bottom_right',
          querySeqLengths: [64, 40],
          keyValueSeqLengths: [64, 20],
        },
      ],
      ['S_b = 0', { querySeqLengths: [64, 30], keyValueSeqLengths: [64, 0] }],
    ];
    for (const [name, options] of probes) {
      const p = deviceProblem({ ...c, options }, 'bfloat16', seed, { returnLogSumExp: true });
      try {
        const r = runCudnnAttention(p, { rawEmptyRows: true });
        const o = r.output.toFloat64Array();
        const lse = r.logSumExp?.toFloat64Array() ?? new Float64Array(0);
        const row = (t: number) => o.subarray((1 * 64 + t) * 2 * 64, ((1 * 64 + t) * 2 + 1) * 64);
        const first = row(0);
        const kind = first.every((x) => x === 0)
          ? 'zeros'
          : first.some(Number.isNaN)
            ? 'NaN'
            : `values like ${first[0]}`;
        console.log(`# PROBE ${name}: batch 1 row 0 holds ${kind}; its lse ${lse[(1 * 64 + 0) * 2]}`);
      } catch (error) {
        console.log(`# PROBE ${name}: ${error instanceof Error ? error.message : error}`);
      }
    }
  });
});
