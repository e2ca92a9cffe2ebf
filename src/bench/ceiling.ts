/**
 * The matmul ceiling that '% peak' is relative to: what this GPU's tensor cores reach on a dense
 * bf16 8192³ matmul through attnlab's own cuBLASLt binding. Attention does the same tensor-core work
 * plus softmax, so this is the honest upper bound for a forward pass, not the datasheet number
 * (H200 datasheet: 989 dense bf16; PyTorch measured 802 on the lent machine).
 *
 * Measured once per GPU and cached in a small JSON file; `--ceiling <TFLOP/s>` overrides it.
 */

import { mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { CUBLAS_COMPUTE, CUDA_DATA_TYPE } from '../backends/cuda/ffi/cublaslt.js';
import { cudaAvailable, getCudaContext, synchronize } from '../backends/cuda/runtime/context.js';
import { matmulPlan, runMatmul } from '../backends/cuda/runtime/matmul.js';
import { allocDevice, fillDevice32 } from '../backends/cuda/runtime/memory.js';
import { config } from '../config.js';
import type { CeilingInfo } from '../results/schema.js';
import { CudaEventTimer } from './cuda-timer.js';
import { summarize } from './stats.js';

/** M = N = K: large enough that every Hopper SM has many tiles (64×64 tiles of 128×128). */
export const CEILING_SIZE = 8192;

/** Where measured ceilings are kept: <cache root>/matmul-ceiling.json, one entry per GPU name. */
export function ceilingCachePath(): string {
  return config().ceilingCacheFile;
}

function readCache(): Record<string, CeilingInfo> {
  try {
    return JSON.parse(readFileSync(ceilingCachePath(), 'utf8'));
  } catch {
    return {};
  }
}

function writeCache(gpu: string, ceiling: CeilingInfo): void {
  const path = ceilingCachePath();
  const entries = { ...readCache(), [gpu]: ceiling };
  mkdirSync(dirname(path), { recursive: true });
  // Temp file then rename: a concurrent reader sees the old file or the new one, never half of one.
  const temp = `${path}.${process.pid}.tmp`;
  writeFileSync(temp, `${JSON.stringify(entries, null, 2)}\n`);
  renameSync(temp, path);
}

/**
 * Times a bf16 CEILING_SIZE³ matmul (float32 accumulation) with CUDA events: 3 warm-up calls, then
 * the median of 20. Inputs are filled with 1.0 so the numbers are finite without a host upload.
 */
export function measureMatmulCeiling(): CeilingInfo {
  const n = CEILING_SIZE;
  getCudaContext();
  const bytes = n * n * 2;
  const [a, b, d] = [allocDevice(bytes), allocDevice(bytes), allocDevice(bytes)];
  const timer = new CudaEventTimer(20);
  try {
    // Two bf16 ones (0x3f80) per 32-bit word.
    fillDevice32(a, 0x3f803f80);
    fillDevice32(b, 0x3f803f80);
    const operand = { type: CUDA_DATA_TYPE.R_16BF, rows: n, cols: n, ld: n, batchStride: 0, alignment: 256 };
    const plan = matmulPlan({
      transA: false,
      transB: false,
      a: operand,
      b: operand,
      d: operand,
      batch: 1,
      computeType: CUBLAS_COMPUTE.F32,
      scaleType: CUDA_DATA_TYPE.R_32F,
    });
    for (let i = 0; i < 3; i++) runMatmul(plan, 1, a.ptr, b.ptr, d.ptr);
    synchronize();
    for (let i = 0; i < timer.capacity; i++) timer.time(() => runMatmul(plan, 1, a.ptr, b.ptr, d.ptr));
    const ms = summarize(timer.read()).median;
    return { tflops: (2 * n ** 3) / (ms * 1e-3) / 1e12, dtype: 'bfloat16', source: 'cublaslt' };
  } finally {
    timer.dispose();
    for (const buffer of [a, b, d]) buffer.release();
  }
}

/**
 * The ceiling to use: `given` (from --ceiling) when set; else the cached value for this GPU; else
 * measured now (about a second) and cached. Null on a machine without CUDA or when measuring failed,
 * with the reason in `note`.
 */
export function resolveCeiling(given?: number): { ceiling: CeilingInfo | null; note?: string } {
  if (given !== undefined) return { ceiling: { tflops: given, dtype: 'bfloat16', source: 'given' } };
  const cuda = cudaAvailable();
  if (!cuda.ok) return { ceiling: null, note: 'no matmul ceiling on a machine without CUDA' };
  const gpu = getCudaContext().properties.name;
  const cached = readCache()[gpu];
  if (cached && cached.tflops > 0) return { ceiling: { ...cached, source: `${cached.source} (cached)` } };
  try {
    const ceiling = measureMatmulCeiling();
    try {
      writeCache(gpu, ceiling);
    } catch {
      // A read-only home still gets the measured number, just not a cached one.
    }
    return { ceiling };
  } catch (error) {
    return {
      ceiling: null,
      note: `matmul ceiling not measured: ${error instanceof Error ? error.message : error}`,
    };
  }
}
