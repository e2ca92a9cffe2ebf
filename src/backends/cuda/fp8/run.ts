/**
 * One FP8 attention step on the GPU, all on attnlab's stream:
 *   1. the scalar block: delayed scaling copies the host's scales in; current scaling zeroes it,
 *      records amax(Q, K, V) in a first pass and derives the scales on the device;
 *   2. one fused launch quantises Q, K, V to e4m3 and records their amax;
 *   3. cuDNN's FP8 SDPA graph writes O8 (e4m3; bf16 output is Blackwell-only) and amax_s, amax_o;
 *   4. O8 is dequantised to bf16;
 *   5. the block is read back: the five amax values (and the scales used) go to the module's state.
 * Step 5 waits for the GPU. Keeping the histories on the host (TE keeps them on the device) makes
 * each call end with one synchronisation, tens of microseconds against milliseconds of attention.
 */
import { InvalidArgumentError } from '../../../api/errors.js';
import type { AttentionProblem } from '../../../api/problem.js';
import type { PerTensor } from '../../../te/fp8-state.js';
import { type Fp8DType, fp8Max } from '../../../te/quantise.js';
import { Tensor } from '../../../tensor/tensor.js';
import { allocDevice, copyToDevice, copyToHost } from '../memory.js';
import { fp8GraphFeatures, SCALAR_BLOCK_BYTES, SCALAR_SLOTS as SLOT } from './graph.js';
import { launchCurrentScales, launchDequantise, launchQuantise3 } from './kernels.js';
import { executeFp8Plan, fp8Plan } from './plan.js';

export interface CudaFp8Request {
  /** Validated, bfloat16, on the GPU, supported (fp8Support said so). */
  readonly problem: AttentionProblem;
  readonly dtype8: Fp8DType;
  /** Delayed: the scales to use; current: derived on the GPU from this step's amax. */
  readonly scaling:
    | { readonly kind: 'delayed'; readonly scales: PerTensor<number> }
    | { readonly kind: 'current' };
  readonly keepFp8Output: boolean;
}

export interface CudaFp8Result {
  readonly output: Tensor;
  readonly output8?: { readonly tensor: Tensor; readonly scaleInv: number };
  readonly scales: PerTensor<number>;
  readonly amax: PerTensor<number>;
  readonly variant: string;
}

/** The initial scalar block: the scales and their inverses for delayed scaling, zeros otherwise. */
function initialBlock(scaling: CudaFp8Request['scaling']): Float32Array {
  const block = new Float32Array(SCALAR_BLOCK_BYTES / 4);
  if (scaling.kind === 'delayed') {
    const { q, k, v, s, o } = scaling.scales;
    const put = (slot: number, value: number) => {
      block[slot * 4] = value;
    };
    put(SLOT.scaleQ, q);
    put(SLOT.scaleK, k);
    put(SLOT.scaleV, v);
    put(SLOT.scaleS, s);
    put(SLOT.scaleO, o);
    put(SLOT.descaleQ, 1 / q);
    put(SLOT.descaleK, 1 / k);
    put(SLOT.descaleV, 1 / v);
    put(SLOT.descaleS, 1 / s);
  }
  return block;
}

/** Runs one FP8 step; see the file comment for the order of work. */
export function runCudaFp8(request: CudaFp8Request): CudaFp8Result {
  const p = request.problem;
  if (request.dtype8 !== 'float8_e4m3fn') {
    throw new InvalidArgumentError('dtype8', 'float8_e4m3fn (the forward FP8 type)', request.dtype8);
  }
  const { B, T, S, N, K, H } = p;
  const plan = fp8Plan(fp8GraphFeatures(p));
  const [queryElements, keyValueElements] = [B * T * N * H, B * S * K * H];
  const block = copyToDevice(new Uint8Array(initialBlock(request.scaling).buffer));
  const q8 = allocDevice(queryElements);
  const k8 = allocDevice(keyValueElements);
  const v8 = allocDevice(keyValueElements);
  const o8 = allocDevice(queryElements);
  const output = allocDevice(queryElements * 2);
  const lengths = [p.querySeqLengths, p.keyValueSeqLengths].some((l) => l !== null)
    ? [p.querySeqLengths ?? new Int32Array(B).fill(T), p.keyValueSeqLengths ?? new Int32Array(B).fill(S)].map(
        (l) => copyToDevice(new Uint8Array(Int32Array.from(l).buffer)),
      )
    : null;
  const inputs = [p.query.buffer.ptr, p.key.buffer.ptr, p.value.buffer.ptr] as const;
  const outputs = [q8.ptr, k8.ptr, v8.ptr] as const;
  const readBack = new Float32Array(SCALAR_BLOCK_BYTES / 4);
  try {
    if (request.scaling.kind === 'current') {
      launchQuantise3(inputs, outputs, queryElements, keyValueElements, block.ptr, true);
      launchCurrentScales(block.ptr, fp8Max(request.dtype8));
    }
    launchQuantise3(inputs, outputs, queryElements, keyValueElements, block.ptr, false);
    executeFp8Plan(
      plan,
      {
        q8: q8.ptr,
        k8: k8.ptr,
        v8: v8.ptr,
        o8: o8.ptr,
        scalarBlock: block.ptr,
        seqLenQ: lengths?.[0].ptr,
        seqLenKv: lengths?.[1].ptr,
      },
      p.scale,
    );
    launchDequantise(o8.ptr, output.ptr, queryElements, block.ptr);
    copyToHost(block, new Uint8Array(readBack.buffer));
  } catch (error) {
    output.release();
    o8.release();
    throw error;
  } finally {
    // The pool is stream-ordered: a later user of these blocks runs after this step's kernels.
    for (const buffer of [block, q8, k8, v8, ...(lengths ?? [])]) buffer.release();
  }
  const at = (slot: number) => readBack[slot * 4];
  const scales = {
    q: at(SLOT.scaleQ),
    k: at(SLOT.scaleK),
    v: at(SLOT.scaleV),
    s: at(SLOT.scaleS),
    o: at(SLOT.scaleO),
  };
  const amax = {
    q: at(SLOT.amaxQ),
    k: at(SLOT.amaxK),
    v: at(SLOT.amaxV),
    s: at(SLOT.amaxS),
    o: at(SLOT.amaxO),
  };
  let output8: CudaFp8Result['output8'];
  if (request.keepFp8Output)
    output8 = { tensor: Tensor.fromDeviceBuffer(o8, [B, T, N, H], request.dtype8), scaleInv: 1 / scales.o };
  else o8.release();
  return {
    output: Tensor.fromDeviceBuffer(output, [B, T, N, H], 'bfloat16'),
    output8,
    scales,
    amax,
    variant: plan.variant,
  };
}
