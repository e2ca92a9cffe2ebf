/**
 * The cuDNN backend's answers that need no GPU: why it refuses a case, what keys its plan cache,
 * and where plan files go.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { attention } from '../../../../../src/api/attention.js';
import { validateAttention } from '../../../../../src/api/validate.js';
import { type CudnnEnvironment, describeSdpa } from '../../../../../src/backends/cuda/cudnn/features.js';
import { planCacheDir, planFileName } from '../../../../../src/backends/cuda/cudnn/plan-cache.js';
import type { AttentionOptions, AttentionProblem } from '../../../../../src/backends/problem.js';
import { readConfig } from '../../../../../src/config.js';
import { UnsupportedError } from '../../../../../src/errors.js';
import type { FloatDType } from '../../../../../src/tensor/dtype.js';
import { randomNormal } from '../../../../../src/tensor/random.js';
import { Tensor } from '../../../../../src/tensor/tensor.js';

const H200: CudnnEnvironment = {
  version: 91900,
  computeCapability: { major: 9, minor: 0 },
  gpuName: 'NVIDIA H200',
};

interface Case {
  B?: number;
  T?: number;
  S?: number;
  N?: number;
  K?: number;
  H?: number;
  dtype?: FloatDType;
}

function problem(c: Case, options: AttentionOptions = {}): AttentionProblem {
  const { B = 2, T = 16, S = 16, N = 4, K = 2, H = 64, dtype = 'bfloat16' } = c;
  const q = randomNormal([B, T, N, H], { seed: 1, dtype });
  const k = randomNormal([B, S, K, H], { seed: 2, dtype });
  const v = randomNormal([B, S, K, H], { seed: 3, dtype });
  return validateAttention(q, k, v, options);
}

function reason(p: AttentionProblem, env: CudnnEnvironment = H200): string {
  const d = describeSdpa(p, env);
  assert.ok(!d.ok, 'expected cuDNN to refuse');
  return d.reason;
}

describe('cuDNN refuses what its engines cannot run, and says why', () => {
  it('float32 and float64 inputs', () => {
    assert.match(reason(problem({ dtype: 'float32' })), /float16 or bfloat16 inputs, got float32/);
    assert.match(reason(problem({ dtype: 'float64' })), /got float64/);
  });
  it('a GPU older than compute capability 8.0', () => {
    const t4 = { ...H200, computeCapability: { major: 7, minor: 5 }, gpuName: 'Tesla T4' };
    assert.match(reason(problem({}), t4), /compute capability 8\.0 or newer; Tesla T4 is 7\.5/);
  });
  it('head dims that are not multiples of 8 or exceed 256', () => {
    assert.match(reason(problem({ H: 36 })), /multiples of 8 and at most 256, got H=36/);
    assert.match(reason(problem({ H: 264 })), /got H=264/);
  });
  it('a bias of another dtype', () => {
    const f32 = randomNormal([1, 1, 16, 16], { seed: 4, dtype: 'float32' });
    assert.match(
      reason(problem({}, { bias: f32 })),
      /bias must have the inputs' dtype bfloat16, got float32/,
    );
  });
  it("cuDNN 9.14.0's non-causal window bug at S > 1024", () => {
    const p = problem({ B: 1, T: 8, S: 1100, N: 1, K: 1, H: 8 }, { localWindowSize: [64, 2000] });
    assert.match(reason(p, { ...H200, version: 91400 }), /9\.14\.0/);
    assert.ok(describeSdpa(p, { ...H200, version: 91401 }).ok);
  });
  it('through attention(): a forced cudnn call on a machine without CUDA names the reason', () => {
    const q = randomNormal([1, 4, 1, 8], { seed: 1, dtype: 'bfloat16' });
    // Host tensors never reach a CUDA backend: unsupported, saying where cudnn runs and what runs here.
    assert.throws(
      () => attention(q, q, q, { implementation: 'cudnn' }),
      (e: unknown) =>
        e instanceof UnsupportedError &&
        /cudnn runs on cuda, the inputs are on cpu .*flash, reference/.test(e.message),
    );
  });
});

describe('cuDNN runs what its graph cannot express with device work around it', () => {
  const accept = (p: AttentionProblem) => {
    const d = describeSdpa(p, H200);
    assert.ok(d.ok, d.ok ? '' : d.reason);
    return d;
  };
  const bool = (shape: number[]) =>
    Tensor.fromRaw(new Uint8Array(shape.reduce((x, y) => x * y)).fill(1), shape, 'bool');
  it('a boolean mask becomes a packed bias, B and N kept where mask or bias vary along them', () => {
    const cases: [number[], number[] | null, number[]][] = [
      [[1, 1, 16, 16], null, [1, 1, 16, 16]],
      [[2, 1, 16, 16], null, [2, 1, 16, 16]],
      [[2, 4, 16, 16], null, [2, 4, 16, 16]],
      [[1, 1, 1, 16], null, [1, 1, 16, 16]],
      [
        [2, 1, 16, 1],
        [1, 4, 16, 16],
        [2, 4, 16, 16],
      ],
    ];
    for (const [maskShape, biasShape, dims] of cases) {
      const bias = biasShape ? randomNormal(biasShape, { seed: 4, dtype: 'bfloat16' }) : undefined;
      const d = accept(problem({}, { mask: bool(maskShape), bias }));
      assert.deepEqual(
        d.prepare,
        { convertBias: true, fixEmptyRows: true, foldedRight: null },
        `mask ${maskShape}`,
      );
      assert.equal(d.features.graph, 'composite');
      assert.deepEqual(d.features.bias?.dims, dims, `mask ${maskShape} bias ${biasShape}`);
      assert.deepEqual(d.features.bias?.strides, [dims[1] * 256, 256, 16, 1]);
    }
  });
  it('a mask and a bias of the same dims share one graph, hence one plan', () => {
    const bias = randomNormal([2, 1, 16, 16], { seed: 4, dtype: 'bfloat16' });
    const withBias = accept(problem({}, { bias, isCausal: true }));
    const withMask = accept(problem({}, { mask: bool([2, 1, 16, 16]), isCausal: true }));
    assert.equal(withMask.key, withBias.key);
    assert.deepEqual(withBias.prepare, { convertBias: false, fixEmptyRows: false, foldedRight: null });
  });
  it('a bias broadcast over T or S is expanded; one broadcast over B or N only is read in place', () => {
    const overT = accept(problem({}, { bias: randomNormal([2, 1, 1, 16], { seed: 4, dtype: 'bfloat16' }) }));
    assert.deepEqual(overT.features.bias, { dims: [2, 1, 16, 16], strides: [256, 256, 16, 1] });
    assert.deepEqual(overT.prepare, { convertBias: true, fixEmptyRows: false, foldedRight: null });
    const overS = accept(problem({}, { bias: randomNormal([1, 4, 16, 1], { seed: 4, dtype: 'bfloat16' }) }));
    assert.deepEqual(overS.features.bias?.dims, [1, 4, 16, 16]);
    assert.equal(overS.prepare.convertBias, true);
    const inPlace = accept(
      problem({}, { bias: randomNormal([1, 4, 16, 16], { seed: 4, dtype: 'bfloat16' }) }),
    );
    assert.equal(inPlace.prepare.convertBias, false);
  });
  it('a bias or a mask beside a bottom-right right bound: the bound goes into the converted bias', () => {
    const bias = randomNormal([1, 1, 8, 16], { seed: 4, dtype: 'bfloat16' });
    const d = accept(problem({ T: 8 }, { bias, isCausal: true, causalAlignment: 'bottom_right' }));
    assert.deepEqual(d.prepare, { convertBias: true, fixEmptyRows: false, foldedRight: 0 });
    assert.equal(d.features.right, null);
    assert.deepEqual(d.features.bias, { dims: [1, 1, 8, 16], strides: [128, 128, 16, 1] });
    // With sequence lengths the bound moves with each batch: the bias keeps B.
    const mask = Tensor.fromRaw(new Uint8Array(8 * 16).fill(1), [1, 1, 8, 16], 'bool');
    const padded = accept(
      problem(
        { T: 8 },
        { mask, localWindowSize: [4, 2], causalAlignment: 'bottom_right', keyValueSeqLengths: [16, 9] },
      ),
    );
    assert.deepEqual(padded.prepare, { convertBias: true, fixEmptyRows: true, foldedRight: 2 });
    assert.equal(padded.features.left, 4);
    assert.deepEqual(padded.features.bias?.dims, [2, 1, 8, 16]);
  });
  it('bottom-right alignment or a left window with T > S: through full sequence lengths', () => {
    for (const options of [
      { isCausal: true, causalAlignment: 'bottom_right' as const },
      { localWindowSize: [3, 0] as [number, number] },
    ]) {
      const d = accept(problem({ T: 24 }, options));
      assert.equal(d.features.padding, true);
      assert.equal(d.features.graph, 'composite');
    }
    // The first 8 rows of a bottom-right causal T=24, S=16 see nothing.
    const br = accept(problem({ T: 24 }, { isCausal: true, causalAlignment: 'bottom_right' }));
    assert.equal(br.prepare.fixEmptyRows, true);
    // Top-left window [i − 3, i] with S = 16: rows 19–23 see nothing; [i − 8, i]: every row sees a key.
    assert.equal(accept(problem({ T: 24 }, { localWindowSize: [3, 0] })).prepare.fixEmptyRows, true);
    assert.equal(accept(problem({ T: 24 }, { localWindowSize: [8, 0] })).prepare.fixEmptyRows, false);
  });
  it('rows that see no key are fixed up after cuDNN, unless asked to leave them raw', () => {
    const p = problem(
      {},
      {
        isCausal: true,
        causalAlignment: 'bottom_right',
        querySeqLengths: [16, 10],
        keyValueSeqLengths: [16, 4],
      },
    );
    assert.equal(accept(p).prepare.fixEmptyRows, true);
    const empty = problem({}, { keyValueSeqLengths: [16, 0] });
    assert.equal(accept(empty).prepare.fixEmptyRows, true);
    const raw = describeSdpa(empty, H200, { rawEmptyRows: true });
    assert.ok(raw.ok && !raw.prepare.fixEmptyRows);
    assert.equal(accept(problem({}, { isCausal: true })).prepare.fixEmptyRows, false);
  });
});

describe('the plan-cache key', () => {
  const key = (p: AttentionProblem, env = H200) => {
    const d = describeSdpa(p, env);
    assert.ok(d.ok, d.ok ? '' : d.reason);
    return d.key;
  };
  it('ignores what is passed at execute time: the scale and the sequence-length values', () => {
    assert.equal(key(problem({}, { scale: 0.1 })), key(problem({}, { scale: 0.7 })));
    const a = problem({}, { querySeqLengths: [16, 3], keyValueSeqLengths: [9, 16] });
    const b = problem({}, { querySeqLengths: [1, 16], keyValueSeqLengths: [16, 2] });
    assert.equal(key(a), key(b));
  });
  it('changes with everything that shapes the graph', () => {
    const plain = key(problem({}));
    const variants = [
      key(problem({ T: 32, S: 32 })),
      key(problem({ K: 4 })),
      key(problem({ dtype: 'float16' })),
      key(problem({}, { isCausal: true })),
      key(problem({}, { localWindowSize: 4 })),
      key(problem({}, { returnLogSumExp: true })),
      key(problem({}, { keyValueSeqLengths: [16, 3] })),
      key(problem({}, { bias: randomNormal([1, 4, 16, 16], { seed: 5, dtype: 'bfloat16' }) })),
      key(problem({}, { bias: randomNormal([2, 4, 16, 16], { seed: 5, dtype: 'bfloat16' }) })),
    ];
    assert.equal(new Set([plain, ...variants]).size, variants.length + 1);
  });
  it('treats a causal T = S problem the same under both alignments', () => {
    const topLeft = key(problem({}, { isCausal: true }));
    assert.equal(key(problem({}, { isCausal: true, causalAlignment: 'bottom_right' })), topLeft);
  });
  it('names plan files by cuDNN version, GPU and key', () => {
    const k = key(problem({}));
    const names = new Set([
      planFileName(k, H200),
      planFileName(k, { ...H200, version: 91400 }),
      planFileName(k, { ...H200, gpuName: 'NVIDIA A100' }),
      planFileName(`${k} `, H200),
    ]);
    assert.equal(names.size, 4);
    assert.match(planFileName(k, H200), /^[0-9a-f]{40}\.json$/);
  });
  it('puts plans under ATTNLAB_CACHE_DIR, and nowhere when ATTNLAB_CUDNN_PLAN_CACHE=0', () => {
    assert.equal(planCacheDir(readConfig({ ATTNLAB_CACHE_DIR: '/tmp/x' })), '/tmp/x/cudnn-plans');
    assert.match(planCacheDir(readConfig({})) ?? '', /\.cache\/attnlab\/cudnn-plans$/);
    assert.equal(
      planCacheDir(readConfig({ ATTNLAB_CUDNN_PLAN_CACHE: '0', ATTNLAB_CACHE_DIR: '/tmp/x' })),
      null,
    );
  });
});
