/**
 * One FP8 attention step on the GPU, ordered on attnlab's stream, with nothing waiting for the host:
 *   1. the scalar block: delayed scaling writes the step's scales from the device state (state.ts);
 *      current scaling records amax(Q, K, V) in a first pass and derives the scales on the device;
 *   2. one fused launch quantises Q, K, V to e4m3 and records their amax;
 *   3. cuDNN's FP8 SDPA graph writes O8 (e4m3; bf16 output is Blackwell-only) and amax_s, amax_o;
 *   4. O8 is dequantised to bf16; where the problem hides keys from some rows (causal, padding), the
 *      NaN repair recomputes any NaN that a hidden key's value put there (../ops/nan-repair.ts)
 *      and O8 follows it;
 *   5. delayed scaling records the five amax values in the device state and updates its scales.
 * Large problems run in 2–4 batch chunks, pipelined over two streams (pipeline.ts).
 * The step works in the process's scalar blocks (stepScalars) and copies them at its end into a
 * block of its own, where its scales and amax values stay until someone reads the report (one
 * synchronisation then): TE keeps its fp8_metas on the device for the same reason.
 */
import { InvalidArgumentError } from '../../../errors.js';
import { type Fp8DType, fp8Max } from '../../../tensor/dtype.js';
import type { DeviceBuffer } from '../../../tensor/storage.js';
import { Tensor } from '../../../tensor/tensor.js';
import type { Fp8Residuals, Fp8StepOutput, Fp8StepReport } from '../../fp8-backend.js';
import type { PerTensor } from '../../fp8-problem.js';
import type { AttentionProblem } from '../../problem.js';
import { sequenceLengthsBuffer } from '../cudnn/execute.js';
import { cu } from '../ffi/driver.js';
import { canHideKeys, repairOutput } from '../ops/nan-repair.js';
import { getCudaContext } from '../runtime/context.js';
import { allocDevice, copyToHost, fillDevice32, growingDeviceBuffer } from '../runtime/memory.js';
import { fp8GraphFeatures, SCALAR_BLOCK_BYTES, SCALAR_SLOTS as SLOT } from './graph.js';
import {
  launchCurrentScales,
  launchDelayedBlock,
  launchDelayedUpdate,
  launchQuantise3,
  launchRequantiseRepaired,
} from './kernels.js';
import { enqueueChunks, pipelineChunks } from './pipeline.js';
import { fp8Plan } from './plan.js';
import type { DeviceDelayedState } from './state.js';

export interface CudaFp8Request {
  /** Validated, bfloat16, on the GPU, supported (fp8Support said so). */
  readonly problem: AttentionProblem;
  readonly dtype8: Fp8DType;
  /** Delayed: the device state to read the scales from and update; current: scales from this step's amax. */
  readonly scaling:
    | {
        readonly kind: 'delayed';
        readonly state: DeviceDelayedState;
        readonly margin: number;
        readonly mostRecent: boolean;
      }
    | { readonly kind: 'current' };
  readonly keepFp8Output: boolean;
  /** Batch chunks to pipeline (a divisor of B); pipelineChunks(problem) when not given. */
  readonly chunks?: number;
  /** Keep Q8, K8, V8, O8 and the log-sum-exp for the FP8 backward (result.residuals). */
  readonly keepResiduals?: boolean;
}

/** What runCudaFp8 returns: the FP8 step's output (the report read back on first use). */
export type CudaFp8Result = Fp8StepOutput;

/** A block nobody read goes back to the pool when its report is collected. */
const unreadBlocks = new FinalizationRegistry<DeviceBuffer>((block) => block.release());

/**
 * At most this many reports hold their blocks unread: past it, all are read back at once (one wait
 * for the GPU per this many steps), so a loop that never reads its reports keeps reusing the pool's
 * blocks instead of asking the driver for new ones until the garbage collector runs.
 */
const MAX_UNREAD_REPORTS = 64;
let unreadReports: WeakRef<BlockReport>[] = [];

/**
 * Fp8StepReport over a step's scalar blocks (one per chunk): one read-back on first use, then the
 * blocks are released.
 */
class BlockReport implements Fp8StepReport {
  #block: DeviceBuffer | null;
  readonly #chunks: number;
  #values: Fp8StepReport | null = null;

  constructor(block: DeviceBuffer, chunks: number) {
    this.#block = block;
    this.#chunks = chunks;
    unreadBlocks.register(this, block, this);
    if (unreadReports.length >= MAX_UNREAD_REPORTS) {
      for (const ref of unreadReports) {
        const report = ref.deref();
        if (report) report.#read();
      }
      unreadReports = [];
    }
    unreadReports.push(new WeakRef(this));
  }

  get scales(): PerTensor<number> {
    return this.#read().scales;
  }

  get amax(): PerTensor<number> {
    return this.#read().amax;
  }

  #read(): Fp8StepReport {
    if (this.#values) return this.#values;
    const block = this.#block!;
    const values = new Float32Array((this.#chunks * SCALAR_BLOCK_BYTES) / 4);
    copyToHost(block, new Uint8Array(values.buffer));
    unreadBlocks.unregister(this);
    block.release();
    this.#block = null;
    const at = (slot: number) => values[slot * 4];
    // Each chunk's graph measured its own amax_s and amax_o; the step's are the largest.
    const largest = (slot: number) =>
      Math.max(
        ...Array.from({ length: this.#chunks }, (_, c) => values[(c * SCALAR_BLOCK_BYTES) / 4 + slot * 4]),
      );
    this.#values = {
      scales: {
        q: at(SLOT.scaleQ),
        k: at(SLOT.scaleK),
        v: at(SLOT.scaleV),
        s: at(SLOT.scaleS),
        o: at(SLOT.scaleO),
      },
      amax: {
        q: at(SLOT.amaxQ),
        k: at(SLOT.amaxK),
        v: at(SLOT.amaxV),
        s: largest(SLOT.amaxS),
        o: largest(SLOT.amaxO),
      },
    };
    return this.#values;
  }
}

/**
 * The scalar blocks every FP8 step works in, kept for the process and grown when a step needs more
 * chunks: cuDNN's variant pack binds the scalars' addresses, and blocks that stay put let the pack
 * be reused (cachedVariantPack) instead of built on every call. One set is enough because steps
 * run in stream order (a pipelined step joins its side stream before it ends); each step copies
 * them into its report's own block at the end.
 */
const stepScalars = growingDeviceBuffer();

/** Runs one FP8 step; see the file comment for the order of work. */
export function runCudaFp8(request: CudaFp8Request): CudaFp8Result {
  const p = request.problem;
  if (request.dtype8 !== 'float8_e4m3fn') {
    throw new InvalidArgumentError('dtype8', 'float8_e4m3fn (the forward FP8 type)', request.dtype8);
  }
  const { B, T, S, N, K, H } = p;
  const chunks = request.chunks ?? pipelineChunks(p);
  if (!Number.isInteger(chunks) || chunks < 1 || B % chunks !== 0) {
    throw new InvalidArgumentError('chunks', `a whole number that divides the batch B=${B}`, String(chunks));
  }
  const keepResiduals = request.keepResiduals ?? false;
  const plan = fp8Plan({ ...fp8GraphFeatures(p), B: B / chunks, stats: keepResiduals });
  const [queryElements, keyValueElements] = [B * T * N * H, B * S * K * H];
  const blockBytes = chunks * SCALAR_BLOCK_BYTES;
  const scalars = stepScalars(blockBytes);
  const block = allocDevice(blockBytes); // the report's copy
  const q8 = allocDevice(queryElements);
  const k8 = allocDevice(keyValueElements);
  const v8 = allocDevice(keyValueElements);
  const o8 = allocDevice(queryElements);
  const output = allocDevice(queryElements * 2);
  const stats = keepResiduals ? allocDevice(B * N * T * 4) : null;
  const lengths = [p.querySeqLengths, p.keyValueSeqLengths].some((l) => l !== null)
    ? [sequenceLengthsBuffer(p.querySeqLengths, B, T), sequenceLengthsBuffer(p.keyValueSeqLengths, B, S)]
    : null;
  const inputs = [p.query.buffer.ptr, p.key.buffer.ptr, p.value.buffer.ptr] as const;
  const quantised = [q8.ptr, k8.ptr, v8.ptr] as const;
  const max = fp8Max(request.dtype8);
  const scaling = request.scaling;
  try {
    if (scaling.kind === 'current') {
      // amax is accumulated with atomics from zero (delayed scaling's first kernel writes every slot).
      fillDevice32(scalars, 0, blockBytes / 4);
      launchQuantise3(inputs, quantised, queryElements, keyValueElements, scalars.ptr, true);
      launchCurrentScales(scalars.ptr, max, chunks);
    } else {
      launchDelayedBlock(scaling.state.buffer.ptr, scalars.ptr, max, chunks);
    }
    enqueueChunks(
      plan,
      {
        inputs,
        quantised,
        o8: o8.ptr,
        output: output.ptr,
        stats: stats ? { ptr: stats.ptr, rows: B * N * T } : undefined,
        blocks: scalars.ptr,
        lengths: lengths && [lengths[0].ptr, lengths[1].ptr],
        batch: B,
        queryElements,
        keyValueElements,
      },
      chunks,
      p.scale,
    );
    if (canHideKeys(p)) {
      // cuDNN's FP8 graph multiplies a masked key's value by its weight 0, so a NaN there reaches
      // rows that never see it (as in the bf16 graph): the repair recomputes those elements from the
      // bf16 inputs over the keys each row sees, and O8 takes the repaired values, e4m3-rounded.
      repairOutput(p, output.ptr);
      launchRequantiseRepaired(o8.ptr, output.ptr, queryElements, scalars.ptr);
    }
    if (scaling.kind === 'delayed') {
      const { state } = scaling;
      const step = state.nextStep();
      launchDelayedUpdate(
        state.buffer.ptr,
        scalars.ptr,
        chunks,
        state.historyLength,
        step,
        scaling.mostRecent,
        scaling.margin,
        max,
      );
    }
    cu().cuMemcpyDtoDAsync_v2(block.ptr, scalars.ptr, blockBytes, getCudaContext().stream);
  } catch (error) {
    for (const buffer of [output, o8, block, ...(stats ? [q8, k8, v8, stats] : [])]) buffer.release();
    throw error;
  } finally {
    // The pool is stream-ordered: a later user of these blocks runs after this step's kernels.
    for (const buffer of [...(keepResiduals ? [] : [q8, k8, v8]), ...(lengths ?? [])]) buffer.release();
  }
  const report = new BlockReport(block, chunks);
  let output8: CudaFp8Result['output8'];
  if (request.keepFp8Output)
    output8 = {
      tensor: Tensor.fromDeviceBuffer(o8, [B, T, N, H], request.dtype8),
      // Read lazily, like the report it comes from: asking for FP8 output does not wait for the step.
      get scaleInv() {
        return 1 / report.scales.o;
      },
    };
  const residuals: Fp8Residuals | undefined = stats
    ? {
        q8: Tensor.fromDeviceBuffer(q8, [B, T, N, H], request.dtype8),
        k8: Tensor.fromDeviceBuffer(k8, [B, S, K, H], request.dtype8),
        v8: Tensor.fromDeviceBuffer(v8, [B, S, K, H], request.dtype8),
        // O8 serves the caller's output8 and the backward alike: the same codes.
        o8: output8 ? output8.tensor : Tensor.fromDeviceBuffer(o8, [B, T, N, H], request.dtype8),
        logSumExp: Tensor.fromDeviceBuffer(stats, [B, N, T], 'float32'),
      }
    : undefined;
  if (!output8 && !residuals) o8.release();
  return {
    residuals,
    output: Tensor.fromDeviceBuffer(output, [B, T, N, H], 'bfloat16'),
    output8,
    report,
    variant: plan.variant,
  };
}
