/**
 * The CUDA runtime on a real GPU: context and info, copies, the caching allocator, out-of-memory,
 * NVRTC compile + disk cache (a second process with ATTNLAB_ASSERT_NO_COMPILE=1 compiles nothing),
 * compile errors, kernel launch with scalar and struct arguments, a failing launch, event timing.
 * Skips, with the reason, where there is no GPU.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { compileHistory, kernelsDir, loadKernels } from '../../../src/backends/cuda/runtime/compile.js';
import {
  cudaAvailable,
  cudaInfo,
  getCudaContext,
  synchronize,
  targetArch,
} from '../../../src/backends/cuda/runtime/context.js';
import { f32, i32, kernelAttributes, launchKernel, ptr } from '../../../src/backends/cuda/runtime/launch.js';
import {
  allocDevice,
  copyToHost,
  emptyCache,
  memoryStats,
} from '../../../src/backends/cuda/runtime/memory.js';
import { timeOnStream } from '../../../src/bench/cuda-timer.js';
import { reloadConfig } from '../../../src/config.js';
import { CompileError, DeviceError, OutOfMemoryError } from '../../../src/errors.js';
import { Tensor } from '../../../src/tensor/tensor.js';

const cuda = cudaAvailable();
const skip = cuda.ok ? false : `no CUDA device: ${cuda.reason}`;

const KERNELS = `
#include "common/dtypes.cuh"
struct FillParams { float* out; int n; float value; };
extern "C" __global__ void fill(float* out, int n, float value) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = value + i;
}
extern "C" __global__ void fill_struct(const FillParams p) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < p.n) p.out[i] = p.value * 2.f + to_float(from_float<bf16_t>(1.5f));
}
`;

describe('CUDA runtime', { skip }, () => {
  const dir = mkdtempSync(join(tmpdir(), 'attnlab-gpu-runtime-'));
  const kernels = join(dir, 'kernels');
  const cache = join(dir, 'cache');
  const saved = { ...process.env };
  before(() => {
    // The test kernels live in their own folder, with the real common/ headers beside them.
    mkdirSync(join(kernels, 'common'), { recursive: true });
    copyFileSync(join(kernelsDir(), 'common/dtypes.cuh'), join(kernels, 'common/dtypes.cuh'));
    writeFileSync(join(kernels, 'fill.cu'), KERNELS);
    writeFileSync(
      join(kernels, 'broken.cu'),
      '__global__ void broken(float* p) {\n  p[0] = undefined_name;\n}\n',
    );
    process.env.ATTNLAB_KERNELS_DIR = kernels;
    process.env.ATTNLAB_CACHE_DIR = cache;
    reloadConfig();
  });
  after(() => {
    process.env.ATTNLAB_KERNELS_DIR = saved.ATTNLAB_KERNELS_DIR;
    process.env.ATTNLAB_CACHE_DIR = saved.ATTNLAB_CACHE_DIR;
    if (saved.ATTNLAB_KERNELS_DIR === undefined) delete process.env.ATTNLAB_KERNELS_DIR;
    if (saved.ATTNLAB_CACHE_DIR === undefined) delete process.env.ATTNLAB_CACHE_DIR;
    reloadConfig();
    rmSync(dir, { recursive: true, force: true });
  });

  it('context, properties and info', () => {
    const { properties, stream } = getCudaContext();
    assert.ok(stream !== 0n);
    assert.ok(properties.computeCapability.major >= 8, JSON.stringify(properties));
    assert.ok(properties.totalMemoryBytes > 2 ** 30);
    const info = cudaInfo();
    console.log(`# ${JSON.stringify(info)}`);
    assert.equal(info.gpu, properties.name);
    assert.match(info.nvrtc, /^\d+\.\d+ \(/);
    assert.match(info.cublasLt, /^\d+\.\d+\.\d+ \(/);
    assert.match(info.cudnn, /^9\.\d+\.\d+ \(/);
    if (properties.computeCapability.major === 9) assert.equal(targetArch(), 'sm_90a');
  });

  it('copies round-trip exactly, including empty and odd-sized tensors', () => {
    for (const [values, dtype] of [
      [[1.5, -2, 3.25], 'float32'],
      [[0.1, 0.2, 0.3], 'bfloat16'],
      [[], 'float16'],
      [[7], 'float64'],
    ] as const) {
      const host = Tensor.fromArray(values, [values.length], dtype);
      const device = host.to('cuda');
      assert.deepEqual(device.toHost().data, host.data);
      device.dispose();
    }
  });

  it('the pool reuses a released block of the same size class', () => {
    const a = allocDevice(1000);
    const address = a.ptr;
    a.release();
    const hits = memoryStats().cacheHits;
    const b = allocDevice(900);
    assert.equal(b.ptr, address);
    assert.equal(memoryStats().cacheHits, hits + 1);
    b.release();
    emptyCache();
    assert.equal(memoryStats().reservedBytes, memoryStats().currentBytes);
  });

  it('asking for 1 PiB is an OutOfMemoryError with asked, free and total', () => {
    const before = memoryStats();
    assert.throws(
      () => allocDevice(2 ** 50),
      (e: unknown) =>
        e instanceof OutOfMemoryError &&
        e.requestedBytes === 2 ** 50 &&
        e.freeBytes > 0 &&
        e.totalBytes >= e.freeBytes &&
        /1024\.00 TiB/.test(e.message),
    );
    assert.equal(memoryStats().currentBytes, before.currentBytes);
  });

  it('compiles with NVRTC, launches with scalar and struct arguments', () => {
    const module = loadKernels({ file: 'fill.cu', kernels: ['fill', 'fill_struct'] });
    assert.equal(compileHistory().at(-1)?.source, 'nvrtc');
    const n = 1000;
    const buffer = allocDevice(n * 4);
    const fill = module.functions.get('fill')!;
    launchKernel(fill, { grid: [Math.ceil(n / 256), 1, 1], block: [256, 1, 1] }, [
      ptr(buffer.ptr),
      i32(n),
      f32(0.5),
    ]);
    const out = new Float32Array(n);
    copyToHost(buffer, new Uint8Array(out.buffer));
    assert.deepEqual([out[0], out[1], out[999]], [0.5, 1.5, 999.5]);
    const fillStruct = module.functions.get('fill_struct')!;
    launchKernel(fillStruct, { grid: [Math.ceil(n / 256), 1, 1], block: [256, 1, 1] }, [
      {
        type: 'struct',
        fields: [
          { type: 'ptr', value: buffer.ptr },
          { type: 'i32', value: n },
          { type: 'f32', value: 3 },
        ],
      },
    ]);
    copyToHost(buffer, new Uint8Array(out.buffer));
    assert.ok(
      out.every((x) => x === 7.5),
      `struct fill gave ${out[0]}`,
    );
    console.log(
      `# fill kernel: ${JSON.stringify(kernelAttributes(fill))}, compile ${compileHistory().at(-1)?.milliseconds.toFixed(1)} ms`,
    );
    loadKernels({ file: 'fill.cu', kernels: ['fill', 'fill_struct'] });
    assert.equal(compileHistory().at(-1)?.source, 'memory');
    const timing = timeOnStream(
      () =>
        launchKernel(fill, { grid: [Math.ceil(n / 256), 1, 1], block: [256, 1, 1] }, [
          ptr(buffer.ptr),
          i32(n),
          f32(1),
        ]),
      { iterations: 20 },
    );
    assert.ok(timing.median > 0 && timing.median < 10, JSON.stringify(timing));
    buffer.release();
  });

  it('a launch the driver refuses is a DeviceError naming cuLaunchKernel', () => {
    const fill = loadKernels({ file: 'fill.cu', kernels: ['fill', 'fill_struct'] }).functions.get('fill')!;
    assert.throws(
      () => launchKernel(fill, { grid: [1, 1, 1], block: [4096, 1, 1] }, [ptr(0n), i32(0), f32(0)]),
      (e: unknown) =>
        e instanceof DeviceError && e.call === 'cuLaunchKernel' && e.status.startsWith('CUDA_ERROR_'),
    );
    synchronize();
  });

  it('a kernel that does not compile is a CompileError with the log and numbered lines', () => {
    assert.throws(
      () => loadKernels({ file: 'broken.cu', kernels: ['broken'] }),
      (e: unknown) =>
        e instanceof CompileError &&
        /undefined_name/.test(e.log) &&
        /> 2 \| {3}p\[0\] = undefined_name;/.test(e.excerpt) &&
        e.options.some((o) => o.startsWith('--gpu-architecture=sm_')),
    );
  });

  it('a second process finds the disk cache and compiles nothing', () => {
    const env = {
      ...process.env,
      ATTNLAB_ASSERT_NO_COMPILE: '1',
      ATTNLAB_KERNELS_DIR: kernels,
      ATTNLAB_CACHE_DIR: cache,
    };
    const script = `
      const { loadKernels, compileHistory } = await import('./src/backends/cuda/runtime/compile.ts');
      loadKernels({ file: 'fill.cu', kernels: ['fill', 'fill_struct'] });
      console.log(compileHistory().at(-1).source);`;
    const run = (extra: NodeJS.ProcessEnv) =>
      spawnSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
        env: { ...env, ...extra },
        encoding: 'utf8',
      });
    const warm = run({});
    assert.equal(warm.status, 0, warm.stderr);
    assert.equal(warm.stdout.trim(), 'disk');
    const cold = run({ ATTNLAB_CACHE_DIR: join(dir, 'empty-cache') });
    assert.notEqual(cold.status, 0);
    assert.match(cold.stderr, /ATTNLAB_ASSERT_NO_COMPILE=1 forbids compiling/);
  });

  it('a warm naive attention call in a new process compiles nothing', () => {
    delete process.env.ATTNLAB_KERNELS_DIR;
    reloadConfig();
    const script = `
      const { attention } = await import('./src/api/attention.ts');
      const { randomNormal } = await import('./src/tensor/random.ts');
      const q = randomNormal([1, 8, 2, 32], { seed: 1, dtype: 'bfloat16' }).to('cuda');
      const r = attention(q, q, q, { implementation: 'naive', isCausal: true });
      console.log(r.variant, r.output.toFloat64Array().every(Number.isFinite));`;
    const env: NodeJS.ProcessEnv = { ...process.env, ATTNLAB_CACHE_DIR: cache };
    delete env.ATTNLAB_KERNELS_DIR;
    const run = (extra: NodeJS.ProcessEnv) =>
      spawnSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
        env: { ...env, ...extra },
        encoding: 'utf8',
      });
    const first = run({});
    assert.equal(first.status, 0, first.stderr);
    const warm = run({ ATTNLAB_ASSERT_NO_COMPILE: '1' });
    assert.equal(warm.status, 0, warm.stderr);
    assert.match(warm.stdout, /^naive-cublaslt-bfloat16\+attnlab_softmax<bf16_t,float,true> true$/m);
    process.env.ATTNLAB_KERNELS_DIR = kernels;
    reloadConfig();
  });
});
