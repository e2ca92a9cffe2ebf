/**
 * The launcher of src/kernels/naive/softmax.cu: picks the variant (probability dtype, bias dtype, whether
 * the row fits in shared memory), builds the one SoftmaxParams struct from the problem, and computes
 * grid, block and shared memory.
 */

import type { FloatDType } from '../../../tensor/dtype.js';
import type { AttentionProblem } from '../../problem.js';
import { loadKernels } from '../runtime/compile.js';
import { getCudaContext } from '../runtime/context.js';
import { launchKernel, type ScalarType } from '../runtime/launch.js';

/** Kernel-side names of the dtypes a probability or bias row can have. */
const DEVICE_TYPE: Partial<Record<FloatDType, string>> = {
  float32: 'float',
  float16: 'f16_t',
  bfloat16: 'bf16_t',
};

export function deviceTypeName(dtype: FloatDType): string | undefined {
  return DEVICE_TYPE[dtype];
}

/** A window bound of Infinity becomes this: far past any length, with room for i + bound + 1 in int64. */
const UNBOUNDED = 1 << 30;

export interface SoftmaxBuffers {
  readonly scores: bigint;
  /** Equal to `scores` for float32 (in place). */
  readonly probs: bigint;
  /** 0n when no log-sum-exp is asked for. */
  readonly lse: bigint;
  readonly queryLengths: bigint;
  readonly keyValueLengths: bigint;
}

export interface SoftmaxVariant {
  readonly probType: string;
  readonly biasType: string;
  readonly cacheRow: boolean;
  /** The kernel's name expression, also its part of the backend's variant key. */
  readonly name: string;
}

/**
 * The row is cached in shared memory when S float32 logits fit in what one block may opt into
 * (227 KiB on sm_90, so S ≤ ~58,000); past that the kernel reads the scores three times.
 */
export function softmaxVariant(
  p: AttentionProblem,
  probDType: FloatDType,
  sharedLimit: number,
): SoftmaxVariant {
  const probType = DEVICE_TYPE[probDType] ?? 'float';
  const biasType = p.bias ? (DEVICE_TYPE[p.bias.tensor.dtype as FloatDType] ?? 'float') : 'float';
  const cacheRow = p.S * 4 <= sharedLimit;
  return { probType, biasType, cacheRow, name: `attnlab_softmax<${probType}, ${biasType}, ${cacheRow}>` };
}

/**
 * Threads per row: enough that each thread handles ~8 keys, between 128 and 1024. 8 keys per thread
 * keeps the three passes' loops short while a block still has 4+ warps to hide memory latency.
 */
export function softmaxBlockSize(S: number): number {
  const threads = 2 ** Math.ceil(Math.log2(Math.max(1, Math.ceil(S / 8))));
  return Math.min(1024, Math.max(128, threads));
}

/** The SoftmaxParams fields in the order of the struct in softmax.cu. */
export function softmaxFields(
  p: AttentionProblem,
  buffers: SoftmaxBuffers,
): Array<{ type: ScalarType; value: number | bigint }> {
  const bs = p.bias?.strides ?? [0, 0, 0, 0];
  const ms = p.mask?.strides ?? [0, 0, 0, 0];
  const bound = (x: number) => (Number.isFinite(x) ? x : UNBOUNDED);
  return [
    { type: 'ptr', value: buffers.scores },
    { type: 'ptr', value: buffers.probs },
    { type: 'ptr', value: buffers.lse },
    { type: 'ptr', value: p.bias ? p.bias.tensor.buffer.ptr : 0n },
    { type: 'ptr', value: p.mask ? p.mask.tensor.buffer.ptr : 0n },
    { type: 'ptr', value: buffers.queryLengths },
    { type: 'ptr', value: buffers.keyValueLengths },
    ...bs.map((s) => ({ type: 'i64' as const, value: s })),
    ...ms.map((s) => ({ type: 'i64' as const, value: s })),
    { type: 'i32', value: p.B },
    { type: 'i32', value: p.N },
    { type: 'i32', value: p.T },
    { type: 'i32', value: p.S },
    { type: 'i32', value: p.window ? bound(p.window.left) : 0 },
    { type: 'i32', value: p.window ? bound(p.window.right) : 0 },
    { type: 'i32', value: p.causal ? 1 : 0 },
    { type: 'i32', value: p.alignment === 'bottom_right' ? 1 : 0 },
    { type: 'i32', value: p.window ? 1 : 0 },
  ];
}

/** A softmax variant with its loaded kernel, kept by a caller that launches it again and again. */
export interface SoftmaxKernel {
  readonly variant: SoftmaxVariant;
  readonly fn: bigint;
}

/** Compiles (or finds cached) the softmax variant for `p`. */
export function softmaxKernel(p: AttentionProblem, probDType: FloatDType): SoftmaxKernel {
  const { properties } = getCudaContext();
  const variant = softmaxVariant(p, probDType, properties.maxSharedMemoryPerBlockOptin);
  const module = loadKernels({ file: 'naive/softmax.cu', kernels: [variant.name] });
  const fn = module.functions.get(variant.name);
  if (fn === undefined) throw new Error(`unreachable: ${variant.name} not in its module`);
  return { variant, fn };
}

/** Launches the softmax over every (b, n, i) row. */
export function launchSoftmax(p: AttentionProblem, kernel: SoftmaxKernel, buffers: SoftmaxBuffers): void {
  launchKernel(
    kernel.fn,
    {
      // Rows on x (up to 2³¹−1), heads and batch on y and z (up to 65,535 each).
      grid: [p.T, p.N, p.B],
      block: [softmaxBlockSize(p.S), 1, 1],
      sharedBytes: kernel.variant.cacheRow ? p.S * 4 : 0,
    },
    [{ type: 'struct', fields: softmaxFields(p, buffers) }],
  );
}
