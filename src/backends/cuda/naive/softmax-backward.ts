/**
 * The launchers of src/kernels/naive/softmax_backward.cu: the softmax backward over each score row, the
 * zeroed copies of non-finite operands and the dV repair for non-finite dO, the bias gradient
 * reduction and the GQA group sum; each picks its variant by name expression, builds its one params
 * struct and computes grid and block.
 */
import type { FloatDType } from '../../../tensor/dtype.js';
import type { BackwardProblem } from '../../backward-problem.js';
import { loadKernels } from '../runtime/compile.js';
import { launchKernel, type ScalarType } from '../runtime/launch.js';
import { deviceTypeName, type SoftmaxBuffers, softmaxBlockSize, softmaxFields } from './softmax.js';

type Fields = Array<{ type: ScalarType; value: number | bigint }>;

const FILE = 'naive/softmax_backward.cu';
/** Threads per block of the elementwise kernels (bias gradient, group sum). */
const ELEMENTWISE_THREADS = 256;

function kernel(name: string): bigint {
  const fn = loadKernels({ file: FILE, kernels: [name] }).functions.get(name);
  if (fn === undefined) throw new Error(`unreachable: ${name} not in its module`);
  return fn;
}

const typeName = (dtype: FloatDType): string => deviceTypeName(dtype) ?? 'float';

export interface SoftmaxBackwardBuffers extends SoftmaxBuffers {
  /** dP in (float32, (B,N,T,S)), dS out in place. */
  readonly dScores: bigint;
  /** dS in the operand dtype, or 0n when that is float32 (dScores serves). */
  readonly dScoresLow: bigint;
}

/** P and dS from the scores, dP and the saved log-sum-exp; returns the kernel's name expression. */
export function launchSoftmaxBackward(
  p: BackwardProblem,
  probDType: FloatDType,
  buffers: SoftmaxBackwardBuffers,
): string {
  const bias = p.bias ? typeName(p.bias.tensor.dtype as FloatDType) : 'float';
  const name = `attnlab_softmax_backward<${typeName(p.dtype)}, ${typeName(probDType)}, ${bias}>`;
  launchKernel(kernel(name), { grid: [p.T, p.N, p.B], block: [softmaxBlockSize(p.S), 1, 1] }, [
    { type: 'struct', fields: softmaxFields(p, buffers) },
    { type: 'struct', fields: softmaxBackwardFields(buffers) },
  ]);
  return name;
}

/** out = `input` (count elements of `dtype`) with each non-finite element set to 0. */
export function launchZeroNonFinite(input: bigint, out: bigint, count: number, dtype: FloatDType): void {
  const name = `attnlab_zero_non_finite<${typeName(dtype)}>`;
  launchKernel(kernel(name), elementwise(count), [
    { type: 'struct', fields: nonFiniteFields(input, out, count) },
  ]);
}

/** The NonFiniteParams fields in the order of the struct in softmax_backward.cu. */
export function nonFiniteFields(input: bigint, out: bigint, count: number): Fields {
  return [
    { type: 'ptr', value: input },
    { type: 'ptr', value: out },
    { type: 'i64', value: count },
  ];
}

/**
 * Adds P·dO into dV per query head (float32 (B,S,N,Hv)) for each non-finite dO element at the keys
 * of nonzero weight: the dV GEMM ran on dO with those elements zeroed.
 */
export function launchNonFiniteDv(
  p: BackwardProblem,
  probDType: FloatDType,
  probs: bigint,
  dvHeads: bigint,
): void {
  const name = `attnlab_non_finite_dv<${typeName(p.dtype)}, ${typeName(probDType)}>`;
  const block = Math.min(256, Math.ceil(p.Hv / 32) * 32);
  launchKernel(kernel(name), { grid: [p.T, p.N, p.B], block: [block, 1, 1] }, [
    { type: 'struct', fields: nonFiniteDvFields(probs, p.dOutput.buffer.ptr, dvHeads, p) },
  ]);
}

/** The NonFiniteDvParams fields in the order of the struct in softmax_backward.cu. */
export function nonFiniteDvFields(
  probs: bigint,
  dOutput: bigint,
  dvHeads: bigint,
  shape: Pick<BackwardProblem, 'N' | 'T' | 'S' | 'Hv'>,
): Fields {
  return [
    { type: 'ptr', value: probs },
    { type: 'ptr', value: dOutput },
    { type: 'ptr', value: dvHeads },
    ...[shape.N, shape.T, shape.S, shape.Hv].map((value) => ({ type: 'i32' as const, value })),
  ];
}

/** The SoftmaxBackwardParams fields in the order of the struct in softmax_backward.cu. */
export function softmaxBackwardFields(
  buffers: Pick<SoftmaxBackwardBuffers, 'dScores' | 'dScoresLow'>,
): Fields {
  return [
    { type: 'ptr', value: buffers.dScores },
    { type: 'ptr', value: buffers.dScoresLow },
  ];
}

function elementwise(total: number): { grid: [number, number, number]; block: [number, number, number] } {
  return { grid: [Math.ceil(total / ELEMENTWISE_THREADS), 1, 1], block: [ELEMENTWISE_THREADS, 1, 1] };
}

/** dBias (the bias's own shape, its dtype) = dS summed over the broadcast dimensions. */
export function launchBiasGrad(p: BackwardProblem, dScores: bigint, dBias: bigint): void {
  const bias = p.bias;
  if (!bias) return;
  const name = `attnlab_bias_grad<${typeName(bias.tensor.dtype as FloatDType)}>`;
  const fields = biasGradFields(p, dScores, dBias);
  launchKernel(kernel(name), elementwise(bias.tensor.size), [{ type: 'struct', fields }]);
}

/** The BiasGradParams fields in the order of the struct in softmax_backward.cu. */
export function biasGradFields(
  p: Pick<BackwardProblem, 'B' | 'N' | 'T' | 'S' | 'bias'>,
  dScores: bigint,
  dBias: bigint,
): Fields {
  // The broadcast strides are 0 exactly on the dimensions of size 1 (validate.ts).
  const strides = p.bias?.strides ?? [0, 0, 0, 0];
  const dims = strides.map((stride, d) => (stride === 0 ? 1 : [p.B, p.N, p.T, p.S][d]));
  return [
    { type: 'ptr', value: dScores },
    { type: 'ptr', value: dBias },
    ...[p.B, p.N, p.T, p.S, ...dims].map((value) => ({ type: 'i32' as const, value })),
  ];
}

/** out (rows, K, D) of `dtype` = Σ over the G query heads of each KV head of `input` (rows, K·G, D) f32. */
export function launchGroupSum(
  input: bigint,
  out: bigint,
  shape: { rows: number; K: number; G: number; D: number },
  dtype: FloatDType,
): void {
  const name = `attnlab_group_sum<${typeName(dtype)}>`;
  const fields = groupSumFields(input, out, shape);
  launchKernel(kernel(name), elementwise(shape.rows * shape.K * shape.D), [{ type: 'struct', fields }]);
}

/** The GroupSumParams fields in the order of the struct in softmax_backward.cu. */
export function groupSumFields(
  input: bigint,
  out: bigint,
  shape: { rows: number; K: number; G: number; D: number },
): Fields {
  return [
    { type: 'ptr', value: input },
    { type: 'ptr', value: out },
    { type: 'i64', value: shape.rows },
    { type: 'i32', value: shape.K },
    { type: 'i32', value: shape.G },
    { type: 'i32', value: shape.D },
  ];
}
