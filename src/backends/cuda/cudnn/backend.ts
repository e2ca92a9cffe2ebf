/**
 * The 'cudnn' attention backend: cuDNN's fused flash-attention engines, driven through the backend
 * API from TypeScript (no cudnn-frontend: it is a C++ header library an FFI cannot call).
 *
 * plan() answers from the problem's features and the machine (cuDNN found, its version, the GPU's
 * compute capability) without touching cuDNN beyond loading it; run() takes the execution plan from
 * the plan cache (memory, then disk, then a build), allocates the output from the pool and enqueues.
 */
import { config } from '../../../config.js';
import { UnsupportedError } from '../../../errors.js';
import { itemSize } from '../../../tensor/dtype.js';
import type { DeviceBuffer } from '../../../tensor/storage.js';
import { Tensor } from '../../../tensor/tensor.js';
import type { AttentionBackend, Planned } from '../../backend.js';
import {
  type AttentionProblem,
  type BackendOutput,
  type ShapeFields,
  sameShapeFields,
  shapeFields,
} from '../../problem.js';
import { cudnnHandle, loadCudnn } from '../ffi/cudnn.js';
import { cudaAvailable, getCudaContext } from '../runtime/context.js';
import { int32OnDevice } from '../runtime/int32-cache.js';
import { allocDevice, copyToDevice, copyToHost } from '../runtime/memory.js';
import { type CallPointers, executePlan } from './execute.js';
import { type CudnnEnvironment, type DescribeOptions, type Description, describeSdpa } from './features.js';
import { biasFromMask, fixEmptyRows } from './masks.js';
import { clearEmptyPackedRows, packLogSumExp, prepareLayoutCall } from './paged-call.js';
import type { CachedPlan } from './plan.js';
import { getPlan, planCacheGeneration } from './plan-cache.js';

type Environment = { ok: true; env: CudnnEnvironment } | { ok: false; reason: string };
let environment: Environment | undefined;

/** cuDNN's version and the GPU, or why cuDNN cannot be used here at all. Computed once. */
export function cudnnEnvironment(): Environment {
  if (environment) return environment;
  const cuda = cudaAvailable();
  if (!cuda.ok) {
    environment = { ok: false, reason: `CUDA is not available (${cuda.reason})` };
    return environment;
  }
  try {
    const { version } = loadCudnn();
    const { name, computeCapability } = getCudaContext().properties;
    environment = { ok: true, env: { version, computeCapability, gpuName: name } };
  } catch (error) {
    environment = { ok: false, reason: error instanceof Error ? error.message : String(error) };
  }
  return environment;
}

/**
 * The cudnn backend's plan of a call: the machine and the graph's description (its features, the
 * plan-cache key, the preparation passes), worked out once; run() takes the execution plan of that
 * key from the plan cache (memory, then disk, then a build).
 */
export interface CudnnPlan {
  readonly env: CudnnEnvironment;
  readonly description: Extract<Description, { ok: true }>;
}

/** Whether cuDNN can run `p` and with which graph. */
export function planCudnn(p: AttentionProblem): Planned<CudnnPlan> {
  const e = cudnnEnvironment();
  if (!e.ok) return { ok: false, reason: e.reason };
  const kept = keptPlan(p);
  if (kept) return kept;
  const description = describeSdpa(p, e.env);
  if (!description.ok) return description;
  const made = { ok: true, plan: { env: e.env, description } } as const;
  if (plain(p)) keep(p, made);
  return made;
}

/**
 * The answers of the last few plain problems (dense, no bias, mask, lengths or modifiers: describeSdpa
 * reads only their sizes and flags then), most recent first, found again by comparing those fields:
 * describeSdpa and the JSON of its key cost ~1.5 KB and ~2 µs a call. A config() reloaded
 * (ATTNLAB_CUDNN_GRAPH) drops them.
 */
interface Kept {
  readonly shape: ShapeFields;
  readonly answer: { readonly ok: true; readonly plan: CudnnPlan };
}
const keptPlans: Kept[] = [];
const KEPT_PLANS = 4;
let keptConfig: unknown = null;

function plain(p: AttentionProblem): boolean {
  return (
    !p.paged &&
    !p.packed &&
    !p.bias &&
    !p.mask &&
    !p.modifiers &&
    !p.blockMask &&
    p.querySeqLengths === null &&
    p.keyValueSeqLengths === null
  );
}

function keptPlan(p: AttentionProblem): Kept['answer'] | null {
  if (config() !== keptConfig || !plain(p)) return null;
  for (let i = 0; i < keptPlans.length; i++)
    if (sameShapeFields(keptPlans[i].shape, p)) return keptPlans[i].answer;
  return null;
}

function keep(p: AttentionProblem, answer: Kept['answer']): void {
  if (config() !== keptConfig) {
    keptPlans.length = 0;
    keptConfig = config();
  }
  keptPlans.unshift({ shape: shapeFields(p), answer });
  if (keptPlans.length > KEPT_PLANS) keptPlans.pop();
}

/** The execution plan a description last took from the plan cache, while that cache still holds it. */
const entries = new WeakMap<object, { handle: bigint; generation: number; entry: CachedPlan }>();

function planEntry(plan: CudnnPlan, handle: bigint): CachedPlan {
  const d = plan.description;
  const known = entries.get(d);
  if (known && known.handle === handle && known.generation === planCacheGeneration()) return known.entry;
  const entry = getPlan(d.key, d.features, plan.env, handle);
  entries.set(d, { handle, generation: planCacheGeneration(), entry });
  return entry;
}

/** A backend result plus where its plan came from (for tests and benchmarks). */
export interface CudnnOutput extends BackendOutput {
  readonly planSource: 'memory' | 'built' | 'disk';
  /** Time spent obtaining the plan in this call (0 for a memory hit), ms. */
  readonly planSetupMs: number;
}

/**
 * Runs `p` on cuDNN. `options` forces a graph kind or statistics layout (tests and benchmarks);
 * throws UnsupportedError with the reason when cuDNN cannot run the case.
 */
export function runCudnnAttention(p: AttentionProblem, options?: DescribeOptions): CudnnOutput {
  const e = cudnnEnvironment();
  if (!e.ok) throw unsupportedError(e.reason);
  const d = describeSdpa(p, e.env, options);
  if (!d.ok) throw unsupportedError(d.reason);
  return runPlannedCudnn(p, { env: e.env, description: d });
}

/** Runs the graph `plan` describes on `p`'s tensors. */
function runPlannedCudnn(p: AttentionProblem, plan: CudnnPlan): CudnnOutput {
  const d = plan.description;
  const f = d.features;
  const handle = cudnnHandle();
  const entry = planEntry(plan, handle);
  const fresh = entry.setupMs > 0 && !reported.has(entry);
  reported.add(entry);

  const { B, T, N, Hv } = f;
  // A packed query gives a packed output (totalT, N, Hv); its log-sum-exp is packed after cuDNN.
  const packedRows = f.ragged?.query ? (p.packed?.querySeqOffsets ?? null) : null;
  const rows = packedRows ? packedRows[B] : B * T;
  const outputShape = packedRows ? [rows, N, Hv] : [B, T, N, Hv];
  const output = Tensor.fromDeviceBuffer(
    allocDevice(rows * N * Hv * itemSize(p.dtype)),
    outputShape,
    p.dtype,
  );
  let statsBuffer = f.stats === 'none' ? null : allocDevice(B * T * N * 4);
  // Per-call device buffers, released once enqueued (the pool is stream-ordered: a later user of
  // these blocks runs after this call's kernels).
  const scratch: DeviceBuffer[] = [];
  try {
    let lengths: [bigint, bigint] | null = null;
    if (f.padding) {
      // Kept on the device across calls, found again by content (int32-cache.ts): not scratch.
      const q = int32OnDevice(p.querySeqLengths ?? new Int32Array(B).fill(T));
      const kv = int32OnDevice(p.keyValueSeqLengths ?? new Int32Array(B).fill(p.S));
      lengths = [q.ptr, kv.ptr];
    }
    const { convertBias, foldedRight } = d.prepare;
    const bias = convertBias ? biasFromMask(p, f, foldedRight, lengths) : null;
    if (bias) scratch.push(bias);
    const layout = prepareLayoutCall(p, f);
    if (layout) scratch.push(...layout.buffers);
    const pointers: CallPointers = {
      ...layout?.pointers,
      query: p.query.buffer.ptr,
      key: p.key.buffer.ptr,
      value: p.value.buffer.ptr,
      output: output.buffer.ptr,
      stats: statsBuffer?.ptr,
      bias: bias ? bias.ptr : p.bias?.tensor.buffer.ptr,
      seqLenQ: lengths?.[0],
      seqLenKv: lengths?.[1],
    };
    executePlan(entry, handle, pointers, p.scale);
    if (packedRows && statsBuffer) {
      scratch.push(statsBuffer);
      statsBuffer = packLogSumExp(statsBuffer, packedRows, T, N);
    }
    if (d.prepare.fixEmptyRows) {
      if (packedRows) clearEmptyPackedRows(p, f, foldedRight, output.buffer.ptr, statsBuffer?.ptr);
      else fixEmptyRows(p, f, foldedRight, output.buffer.ptr, statsBuffer?.ptr, lengths);
    }
  } finally {
    for (const buffer of scratch) buffer.release();
  }
  let logSumExp: Tensor | undefined;
  if (statsBuffer) {
    logSumExp =
      f.stats === 'btn'
        ? Tensor.fromDeviceBuffer(statsBuffer, outputShape.slice(0, -1), 'float32')
        : transposeStatsOnHost(statsBuffer, B, N, T);
  }
  return {
    output,
    logSumExp,
    variant: entry.variant,
    planSource: fresh ? entry.source : 'memory',
    planSetupMs: fresh ? entry.setupMs : 0,
  };
}

const reported = new WeakSet<object>();

export const cudnnBackend: AttentionBackend<CudnnPlan> = {
  name: 'cudnn',
  device: 'cuda',
  // Paged and packed problems go through describeSdpa's layout rules (paged.ts), like any other.
  layouts: ['paged', 'packed'],
  plan: planCudnn,
  run: (plan, p) => runPlannedCudnn(p, plan),
};

/** The error a forced 'cudnn' call throws, named like the registry names backends. */
function unsupportedError(reason: string): UnsupportedError {
  return new UnsupportedError('cudnn (cuda)', reason);
}

/** [B,N,T] → (B,T,N) through the host: the fallback layout when cuDNN cannot write (B,T,N) itself. */
function transposeStatsOnHost(
  buffer: ReturnType<typeof allocDevice>,
  B: number,
  N: number,
  T: number,
): Tensor {
  const bnt = new Float32Array(B * N * T);
  copyToHost(buffer, new Uint8Array(bnt.buffer));
  buffer.release();
  const btn = new Float32Array(B * T * N);
  for (let b = 0; b < B; b++)
    for (let n = 0; n < N; n++)
      for (let t = 0; t < T; t++) btn[(b * T + t) * N + n] = bnt[(b * N + n) * T + t];
  return Tensor.fromDeviceBuffer(copyToDevice(new Uint8Array(btn.buffer)), [B, T, N], 'float32');
}
