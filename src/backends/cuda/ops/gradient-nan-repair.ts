/**
 * The NaN repair of gradients, for a backward whose GEMMs multiply pairs of weight 0 (cuDNN's fused
 * backward: 0·NaN and 0·Inf spread a NaN or Inf input past the gradients the NaN rule allows):
 * src/kernels/ops/grad_nan_repair.cu recomputes, by the rule, every row of dQ, dK and dV that holds
 * a NaN or ±inf element and every such dBias element (docs/internals/nan-repair.md, "Gradients").
 *
 * It is a post-op (gradientNanRepair; `repairGradients(problem, gradients, stream)` is its launch):
 * one kernel enqueued on the stream after the backward's own work, reading nothing back, so the
 * backward stays free of host syncs. Without a non-finite gradient the kernel is one read of dQ, dK,
 * dV (and dBias). The registry's entry for the cudnn backward declares it, since backends of one
 * layer import nothing of each other (docs/internals/architecture.md).
 *
 * Nothing is rebuilt per call: the kernel, the packed FlashParams and the uploaded sequence lengths
 * are kept per problem signature, as the forward's repair keeps them (nan-repair.ts).
 */
import { type FloatDType, itemSize } from '../../../tensor/dtype.js';
import { type PostOp, type Support, withPostOps } from '../../backend.js';
import type { BackwardBackend } from '../../backward-backend.js';
import type { AttentionGradients, BackwardOutput, BackwardProblem } from '../../backward-problem.js';
import { buildFlashParams, marshalFlashParams } from '../flash/params.js';
import { FLASH_BIAS_CODES, type FlashBiasType } from '../flash/sm80/variant.js';
import { loadKernels } from '../runtime/compile.js';
import { type KernelArg, launchKernel, packStruct, type ScalarType } from '../runtime/launch.js';
import { copyInt32ToDevice } from '../runtime/memory.js';

const ELEM: Partial<Record<FloatDType, 0 | 1 | 2>> = { bfloat16: 0, float16: 1, float32: 2 };
/** Eight warps a block: the scan needs no shared memory, only warps to keep loads in flight. */
const THREADS = 256;
/** Enough blocks to fill an H200 (132 SMs × 2 resident blocks at the kernel's 128 registers) many times. */
const MAX_BLOCKS = 132 * 2 * 16;
/** 16-byte loads a lane keeps in flight (REPAIR_UNROLL in the kernel). */
const UNROLL = 4;
/** The kernel's accumulators cover head dims up to 256 (8 a lane), cuDNN's limit. */
const MAX_HEAD_DIM = 256;
const MAX_SIGNATURES = 32;

/** Whether the repair can run on `p`'s gradients, or why not. */
export function gradientRepairSupport(p: BackwardProblem): Support {
  if (ELEM[p.dtype] === undefined)
    return { ok: false, reason: `the gradient repair takes 16-bit or float32 inputs, got ${p.dtype}` };
  if (ELEM[p.output.dtype as FloatDType] === undefined)
    return {
      ok: false,
      reason: `the gradient repair reads a 16-bit or float32 output, got ${p.output.dtype}`,
    };
  if (p.H > MAX_HEAD_DIM || p.Hv > MAX_HEAD_DIM)
    return {
      ok: false,
      reason: `the gradient repair takes head dims up to ${MAX_HEAD_DIM}, got H=${p.H}, Hv=${p.Hv}`,
    };
  if (p.paged || p.packed)
    return { ok: false, reason: 'the gradient repair reads dense (B,T,N,H) and (B,S,K,H) tensors' };
  if (p.bias && p.bias.tensor.dtype !== p.dtype)
    return {
      ok: false,
      reason: `the gradient repair writes dBias in the inputs' dtype, the bias is ${p.bias.tensor.dtype}`,
    };
  return { ok: true };
}

/**
 * The repair as a post-op: the registry runs it after each run of an entry declaring it (cudnn's
 * backward). Every problem cuDNN's backward plans (16-bit, dense, H and Hv ≤ 256, a bias in the inputs'
 * dtype) is one it applies to.
 */
export const gradientNanRepair: PostOp<BackwardProblem, BackwardOutput> = {
  name: 'gradient-nan-repair',
  applies: (p) => gradientRepairSupport(p).ok,
  run: (p, gradients) => repairGradients(p, gradients),
};

/** `backend` declaring the repair after its own post-ops; name, device, plan and run unchanged. */
export function withGradientNanRepair<Plan>(backend: BackwardBackend<Plan>): BackwardBackend<Plan> {
  return withPostOps(backend, [gradientNanRepair]);
}

interface RepairLaunch {
  readonly fn: bigint;
  /** FlashParams packed once; its first seven fields (q, k, v, o, lse, bias, mask) change per call. */
  readonly params: { readonly bytes: Uint8Array; readonly view: DataView; readonly offsets: number[] };
  readonly lengths: readonly { release(): void }[];
}

const launches = new Map<string, RepairLaunch>();

/** Everything of `p` the kernel and the packed FlashParams depend on, except the operand pointers. */
function signature(p: BackwardProblem): string {
  const { bias, mask, window } = p;
  return [
    p.dtype,
    p.output.dtype,
    p.B,
    p.T,
    p.S,
    p.N,
    p.K,
    p.H,
    p.Hv,
    p.scale,
    p.causal,
    p.alignment,
    window ? `${window.left},${window.right}` : '',
    bias ? `${bias.tensor.dtype}:${bias.strides}` : '',
    mask ? `${mask.strides}` : '',
    p.querySeqLengths ?? '',
    p.keyValueSeqLengths ?? '',
  ].join('|');
}

function repairLaunch(p: BackwardProblem): RepairLaunch {
  const key = signature(p);
  const known = launches.get(key);
  if (known) {
    launches.delete(key);
    launches.set(key, known);
    return known;
  }
  const defines = {
    REPAIR_ELEM: ELEM[p.dtype]!,
    REPAIR_O_ELEM: ELEM[p.output.dtype as FloatDType]!,
    FLASH_BIAS: FLASH_BIAS_CODES[(p.bias ? p.bias.tensor.dtype : 'none') as FlashBiasType],
    FLASH_MASK: p.mask ? 1 : 0,
  };
  const name = 'attnlab_grad_nan_repair';
  const fn = loadKernels({ file: 'ops/grad_nan_repair.cu', kernels: [name], defines }).functions.get(name)!;
  const queryLengths = p.querySeqLengths ? copyInt32ToDevice(p.querySeqLengths) : null;
  const keyValueLengths = p.keyValueSeqLengths ? copyInt32ToDevice(p.keyValueSeqLengths) : null;
  const fields = marshalFlashParams(
    buildFlashParams(p, {
      q: 0n,
      k: 0n,
      v: 0n,
      o: 0n,
      lse: 0n,
      bias: 0n,
      mask: 0n,
      qLens: queryLengths?.ptr ?? 0n,
      kvLens: keyValueLengths?.ptr ?? 0n,
    }),
  );
  if (fields.type !== 'struct') throw new Error('marshalFlashParams gives a struct');
  const entry: RepairLaunch = {
    fn,
    params: packStruct(fields.fields),
    lengths: [queryLengths, keyValueLengths].filter((b) => b !== null),
  };
  launches.set(key, entry);
  if (launches.size > MAX_SIGNATURES) {
    const [oldest, dropped] = launches.entries().next().value!;
    launches.delete(oldest);
    // Stream-ordered pool: a later user of these blocks runs after every repair enqueued on them.
    for (const buffer of dropped.lengths) buffer.release();
  }
  return entry;
}

/** The device addresses GradRepairParams holds (0n for no bias). */
export interface GradientPointers {
  readonly dOutput: bigint;
  readonly dQuery: bigint;
  readonly dKey: bigint;
  readonly dValue: bigint;
  readonly dBias: bigint;
}

/** GradRepairParams (src/kernels/ops/grad_repair_params.cuh), field for field in declaration order. */
export function gradientRepairFields(
  pointers: GradientPointers,
  scale: number,
  dBiasDims: readonly [number, number, number, number],
): KernelArg {
  const { dOutput, dQuery, dKey, dValue, dBias } = pointers;
  const fields: Array<{ type: ScalarType; value: number | bigint }> = [
    ...[dOutput, dQuery, dKey, dValue, dBias].map((value) => ({ type: 'ptr' as const, value })),
    { type: 'f32', value: scale },
    ...dBiasDims.map((value) => ({ type: 'i32' as const, value })),
  ];
  return { type: 'struct', fields };
}

/**
 * Enqueues on `stream` (attnlab's when omitted) the repair of `gradients` of `p`: contiguous dQuery
 * (B,T,N,H), dKey (B,S,K,H), dValue (B,S,K,Hv) and, with a bias, dBias in the bias's shape, all in
 * p.dtype. The caller has checked gradientRepairSupport(p).
 */
export function repairGradients(p: BackwardProblem, gradients: AttentionGradients, stream?: bigint): void {
  const elements = [p.B * p.T * p.N * p.H, p.B * p.S * p.K * p.H, p.B * p.S * p.K * p.Hv];
  if (elements.every((count) => count === 0)) return;
  const { dQuery, dKey, dValue, dBias } = gradients;
  for (const t of [dQuery, dKey, dValue, dBias]) {
    // The kernel reads the gradients 16 bytes at a time from their first element.
    if (t && t.size > 0 && t.buffer.ptr % 16n !== 0n)
      throw new Error(`unreachable: a gradient at ${t.buffer.ptr} is not 16-byte aligned`);
  }
  const launch = repairLaunch(p);
  const { view, offsets } = launch.params;
  const operands = [
    p.query.buffer.ptr,
    p.key.buffer.ptr,
    p.value.buffer.ptr,
    p.output.buffer.ptr,
    p.logSumExp.buffer.ptr,
    p.bias?.tensor.buffer.ptr ?? 0n,
    p.mask?.tensor.buffer.ptr ?? 0n,
  ];
  for (let i = 0; i < operands.length; i++) view.setBigUint64(offsets[i], operands[i], true);
  const shape = dBias?.shape ?? [1, 1, 1, 1];
  const g = gradientRepairFields(
    {
      dOutput: p.dOutput.buffer.ptr,
      dQuery: dQuery.buffer.ptr,
      dKey: dKey.buffer.ptr,
      dValue: dValue.buffer.ptr,
      dBias: dBias?.buffer.ptr ?? 0n,
    },
    p.scale,
    [shape[0], shape[1], shape[2], shape[3]],
  );
  // One warp per 32·UNROLL 16-byte pieces of the largest gradient, up to MAX_BLOCKS.
  const pieces = Math.max(...elements, dBias?.size ?? 0) / (16 / itemSize(p.dtype));
  const blocks = Math.max(1, Math.min(MAX_BLOCKS, Math.ceil(pieces / ((THREADS / 32) * 32 * UNROLL))));
  launchKernel(launch.fn, { grid: [blocks, 1, 1], block: [THREADS, 1, 1], sharedBytes: 0, stream }, [
    { type: 'bytes', bytes: launch.params.bytes },
    g,
  ]);
}
