/**
 * The CUDA runtime's CPU-side logic: library search and its errors, cuDNN version ranking, kernel
 * cache keys and header collection, compile-error excerpts, argument-struct layout rules (the
 * kernels' structs against the compiler: kernel-params-layout.test.ts), allocator rounding and the
 * naive backend's matmul shapes.
 * None of it needs a GPU.
 */

import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import { validateAttention } from '../../../../../src/api/validate.js';
import { supports } from '../../../../../src/backends/backend.js';
import {
  cudnnVersionOfFile,
  libraryCandidates,
  loadLibrary,
  rankByCudnnVersion,
} from '../../../../../src/backends/cuda/ffi/libraries.js';
import { cudaNaiveBackend, naiveMatmuls } from '../../../../../src/backends/cuda/naive/backend.js';
import { softmaxBlockSize } from '../../../../../src/backends/cuda/naive/softmax.js';
import {
  compileOptions,
  kernelCacheKey,
  kernelsDir,
  readKernelSources,
  sourceExcerpt,
} from '../../../../../src/backends/cuda/runtime/compile.js';
import {
  cudaAvailable,
  formatCudaVersion,
  formatLibraryVersion,
} from '../../../../../src/backends/cuda/runtime/context.js';
import { structLayout } from '../../../../../src/backends/cuda/runtime/launch.js';
import { commonAlignment } from '../../../../../src/backends/cuda/runtime/matmul.js';
import { roundAllocationSize } from '../../../../../src/backends/cuda/runtime/memory.js';
import { LibraryNotFoundError } from '../../../../../src/errors.js';
import { Tensor } from '../../../../../src/tensor/tensor.js';

const scratch = mkdtempSync(join(tmpdir(), 'attnlab-runtime-'));
after(() => rmSync(scratch, { recursive: true, force: true }));

describe('library search', () => {
  test('an ATTNLAB_* folder is searched first, for each soname', () => {
    const folder = join(scratch, 'nvrtc');
    mkdirSync(folder, { recursive: true });
    writeFileSync(join(folder, 'libnvrtc.so.12'), '');
    const candidates = libraryCandidates('nvrtc', { ATTNLAB_NVRTC: folder });
    assert.equal(candidates[0], join(folder, 'libnvrtc.so.12'));
  });

  test('an ATTNLAB_* variable naming nothing loadable is an error that names it and the library', () => {
    const missing = join(scratch, 'no-such', 'libcublasLt.so.13');
    assert.throws(
      () => loadLibrary('cublasLt', { ATTNLAB_CUBLASLT: missing }),
      (e: unknown) =>
        e instanceof LibraryNotFoundError &&
        e.message.includes(missing) &&
        e.message.includes('libcublasLt.so.13') &&
        e.message.includes('ATTNLAB_CUBLASLT'),
    );
  });

  test('a file that is not a library is listed with the loader’s reason', () => {
    const bogus = join(scratch, 'libcudnn.so.9');
    writeFileSync(bogus, 'not an ELF file');
    assert.throws(
      () => loadLibrary('cudnn', { ATTNLAB_CUDNN: bogus }),
      (e: unknown) => e instanceof LibraryNotFoundError && e.searched.some((s) => s.startsWith(bogus)),
    );
  });

  test('cuDNN copies are ranked newest first, from file names, headers or wheel metadata', () => {
    const system = join(scratch, 'sys');
    mkdirSync(system, { recursive: true });
    writeFileSync(join(system, 'libcudnn.so.9.14.0'), '');
    symlinkSync(join(system, 'libcudnn.so.9.14.0'), join(system, 'libcudnn.so.9'));
    const wheel = join(scratch, 'site-packages', 'nvidia', 'cudnn');
    mkdirSync(join(wheel, 'lib'), { recursive: true });
    mkdirSync(join(wheel, 'include'), { recursive: true });
    writeFileSync(join(wheel, 'lib', 'libcudnn.so.9'), '');
    writeFileSync(
      join(wheel, 'include', 'cudnn_version.h'),
      '#define CUDNN_MAJOR 9\n#define CUDNN_MINOR 19\n#define CUDNN_PATCHLEVEL 0\n',
    );
    assert.equal(cudnnVersionOfFile(join(system, 'libcudnn.so.9')), 91400);
    assert.equal(cudnnVersionOfFile(join(wheel, 'lib', 'libcudnn.so.9')), 91900);
    const ranked = rankByCudnnVersion([join(system, 'libcudnn.so.9'), join(wheel, 'lib', 'libcudnn.so.9')]);
    assert.equal(ranked[0], join(wheel, 'lib', 'libcudnn.so.9'));
  });

  test('cudaAvailable never throws and gives a reason when CUDA is absent', (t) => {
    const available = cudaAvailable();
    if (available.ok) {
      t.diagnostic('a GPU is present here; the reason branch is not exercised');
      return;
    }
    assert.ok(available.reason.length > 0);
    t.diagnostic(`cuda unavailable: ${available.reason.slice(0, 160)}`);
  });

  test('version encodings', () => {
    assert.equal(formatCudaVersion(13000), '13.0');
    assert.equal(formatCudaVersion(12080), '12.8');
    assert.equal(formatLibraryVersion(91400), '9.14.0');
    assert.equal(formatLibraryVersion(130102), '13.1.2');
  });
});

describe('kernel compile cache', () => {
  const base = {
    arch: 'sm_90a',
    nvrtcVersion: '13.0',
    options: ['--gpu-architecture=sm_90a'],
    kernels: ['k<float>'],
    source: 'a',
    headers: [['common/x.cuh', 'b']] as Array<[string, string]>,
  };
  test('the key is stable and changes with every input', () => {
    const key = kernelCacheKey(base);
    assert.match(key, /^[0-9a-f]{64}$/);
    assert.equal(kernelCacheKey({ ...base }), key);
    const variants = [
      { arch: 'sm_80' },
      { nvrtcVersion: '12.9' },
      { options: ['--gpu-architecture=sm_90a', '-DX=1'] },
      { kernels: ['k<half>'] },
      { source: 'a ' },
      { headers: [['common/x.cuh', 'c']] as Array<[string, string]> },
    ];
    for (const change of variants)
      assert.notEqual(kernelCacheKey({ ...base, ...change }), key, JSON.stringify(change));
  });

  test('defines are sorted into the options, and the arch leads', () => {
    const options = compileOptions({ file: 'f.cu', kernels: [], defines: { B: 2, A: 'x' } }, 'sm_90a');
    assert.deepEqual(options.slice(0, 2), ['--gpu-architecture=sm_90a', '--std=c++17']);
    assert.deepEqual(
      options.filter((o) => o.startsWith('-D')),
      ['-DA=x', '-DB=2'],
    );
  });

  test('headers are collected recursively, by the name the source includes them with', () => {
    const root = join(scratch, 'kernels');
    mkdirSync(join(root, 'common'), { recursive: true });
    writeFileSync(join(root, 'main.cu'), '#include "common/a.cuh"\n__global__ void k() {}\n');
    writeFileSync(join(root, 'common', 'a.cuh'), '#pragma once\n#include "common/b.cuh"\n');
    writeFileSync(join(root, 'common', 'b.cuh'), '#pragma once\n');
    const { headers } = readKernelSources('main.cu', root);
    assert.deepEqual(
      headers.map(([name]) => name),
      ['common/a.cuh', 'common/b.cuh'],
    );
    const real = readKernelSources('naive/softmax.cu', kernelsDir());
    assert.ok(real.headers.some(([name]) => name === 'common/dtypes.cuh'));
  });

  test('compile errors show numbered source lines around each error', () => {
    const source = ['line 1', 'line 2', 'line 3', 'broken here', 'line 5', 'line 6', 'line 7', 'line 8'].join(
      '\n',
    );
    const log = 'softmax.cu(4): error: identifier "broken" is undefined\n1 error detected';
    const excerpt = sourceExcerpt(log, 'softmax.cu', source);
    assert.match(excerpt, /^> 4 \| broken here$/m);
    assert.match(excerpt, /^ {2}1 \| line 1$/m);
    assert.match(excerpt, /^ {2}7 \| line 7$/m);
    assert.doesNotMatch(excerpt, /line 8/);
  });
});

describe('kernel arguments', () => {
  test('struct layout follows C rules', () => {
    const layout = structLayout([{ type: 'i32' }, { type: 'ptr' }, { type: 'f32' }]);
    assert.deepEqual(layout.offsets, [0, 8, 16]);
    assert.equal(layout.size, 24);
  });

  test('softmax block size: ~8 keys per thread, 128 to 1024 threads', () => {
    assert.equal(softmaxBlockSize(1), 128);
    assert.equal(softmaxBlockSize(4096), 512);
    assert.equal(softmaxBlockSize(100_000), 1024);
  });
});

describe('allocator rounding and matmul support', () => {
  test('allocation sizes round to 512 B below 1 MiB and 2 MiB above', () => {
    assert.equal(roundAllocationSize(1), 512);
    assert.equal(roundAllocationSize(513), 1024);
    assert.equal(roundAllocationSize(1 << 20), 1 << 20);
    assert.equal(roundAllocationSize((1 << 20) + 1), 2 << 20);
    assert.equal(roundAllocationSize((5 << 20) + 7), 6 << 20);
  });

  test('matmul alignment is the largest power of two dividing every offset, at most 256', () => {
    assert.equal(commonAlignment([1024, 512]), 256);
    assert.equal(commonAlignment([4096, 64 * 2]), 128);
    assert.equal(commonAlignment([226]), 2);
    assert.equal(commonAlignment([0]), 256);
  });
});

describe('naive matmul shapes', () => {
  test('MHA batches all heads of a batch with head stride H', () => {
    const p = validateAttention(
      Tensor.zeros([2, 5, 4, 8]),
      Tensor.zeros([2, 7, 4, 8]),
      Tensor.zeros([2, 7, 4, 6]),
    );
    const { scores, output, perBatchKvHead } = naiveMatmuls(p);
    assert.equal(perBatchKvHead, false);
    assert.equal(scores.batch, 4);
    assert.deepEqual([scores.a.rows, scores.a.cols, scores.a.ld, scores.a.batchStride], [8, 7, 32, 8]);
    assert.deepEqual([scores.d.rows, scores.d.cols, scores.d.ld, scores.d.batchStride], [7, 5, 7, 35]);
    assert.deepEqual([output.d.rows, output.d.cols, output.d.ld, output.d.batchStride], [6, 5, 24, 6]);
  });

  test('GQA batches the query heads of one KV head, reading K and V with batch stride 0', () => {
    const p = validateAttention(
      Tensor.zeros([1, 3, 6, 8]),
      Tensor.zeros([1, 4, 2, 8]),
      Tensor.zeros([1, 4, 2, 8]),
      {
        float32Precision: 'tf32',
      },
    );
    const { scores, output, perBatchKvHead } = naiveMatmuls(p);
    assert.equal(perBatchKvHead, true);
    assert.equal(scores.batch, 3);
    assert.equal(scores.a.batchStride, 0);
    assert.equal(output.a.batchStride, 0);
    assert.equal(scores.b.batchStride, 8);
    assert.equal(scores.computeType, 77, 'CUBLAS_COMPUTE_32F_FAST_TF32');
  });

  test('naive accepts float32, float16 and bfloat16 (CUDA_R_32F is 0, not "missing") and names other dtypes', () => {
    const p = validateAttention(
      Tensor.zeros([1, 2, 1, 8]),
      Tensor.zeros([1, 2, 1, 8]),
      Tensor.zeros([1, 2, 1, 8]),
    );
    for (const dtype of ['float32', 'float16', 'bfloat16'] as const) {
      const support = supports(cudaNaiveBackend, { ...p, device: 'cuda', dtype });
      if (!support.ok) assert.doesNotMatch(support.reason, /dtype/, `${dtype}: ${support.reason}`);
    }
    const float64 = supports(cudaNaiveBackend, { ...p, device: 'cuda', dtype: 'float64' });
    assert.ok(!float64.ok && /dtype float64/.test(float64.reason));
  });
});
