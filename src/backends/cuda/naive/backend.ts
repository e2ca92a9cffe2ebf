/**
 * The naive GPU attention ('naive' on 'cuda'): the codelab's from-scratch path done with real GPU
 * pieces, materialising the (B,N,T,S) scores so that its O(T²) memory shows in memoryStats.
 *
 *   1. scores = scale · Q·Kᵀ   cuBLASLt, float32 out (B,N,T,S)
 *   2. P = softmax(scores + bias, masked)   src/kernels/naive/softmax.cu, in place for float32 inputs,
 *      else into a (B,N,T,S) buffer of the input dtype (the second matmul's operand type)
 *   3. O = P·V   cuBLASLt, (B,T,N,Hv) in the query dtype
 *   4. (the registry adds it) where a key can be hidden: the NaN repair (ops/nan-repair.ts), since
 *      cuBLASLt multiplies a masked or padded key's probability 0 by its V row (0 · NaN = NaN)
 *
 * The layouts are BTNH, so per (b, n) Q is a (T × H) matrix with row stride N·H and K an (S × H)
 * one with row stride K·H: no transposes and no copies. For cuBLASLt (column-major) the first
 * product is computed as scoresᵀ (S × T) = K · Qᵀ and the second as Oᵀ (Hv × T) = Vᵀ · Pᵀ.
 * Batching: with K = N one call per batch b covers all heads (head stride H); with GQA (G = N/K query
 * heads per KV head) one call per (b, KV head) covers its G query heads, reading one K/V matrix with
 * batch stride 0. A repeated call (same shape, buffers and scale) enqueues all
 * of it as one CUDA graph under ATTNLAB_LAUNCH_GRAPH=all (runtime/launch-graph.ts; opt-in until the GPU suite runs it).
 */

import { type FloatDType, itemSize } from '../../../tensor/dtype.js';
import { Tensor } from '../../../tensor/tensor.js';
import { type AttentionBackend, NO_PLAN, type Support } from '../../backend.js';
import type { AttentionProblem, BackendOutput } from '../../problem.js';
import { CUBLAS_COMPUTE, CUDA_DATA_TYPE } from '../ffi/cublaslt.js';
import { cudaAvailable, currentDeviceOrdinal } from '../runtime/context.js';
import {
  beginLaunchGroup,
  endLaunchGroup,
  forgetLaunchGraph,
  GROUP_CAPTURING,
  GROUP_LAUNCHED,
  type LaunchGraph,
  newLaunchGraph,
} from '../runtime/launch-graph.js';
import {
  commonAlignment,
  type MatmulPlan,
  type MatmulShape,
  matmulPlan,
  runMatmul,
} from '../runtime/matmul.js';
import { allocDevice, copyInt32ToDevice } from '../runtime/memory.js';
import {
  deviceTypeName,
  launchSoftmax,
  type SoftmaxBuffers,
  type SoftmaxKernel,
  softmaxKernel,
} from './softmax.js';

const SUPPORTED: Support = { ok: true };
const unsupported = (reason: string): Support => ({ ok: false, reason });

const CUDA_TYPE: Partial<Record<FloatDType, number>> = {
  float32: CUDA_DATA_TYPE.R_32F,
  float16: CUDA_DATA_TYPE.R_16F,
  bfloat16: CUDA_DATA_TYPE.R_16BF,
};

/** Why cuBLASLt and the softmax kernels cannot run `p`, or SUPPORTED (the backward adds its own checks). */
export function naiveSupport(p: AttentionProblem): Support {
  if (p.device !== 'cuda') return unsupported('inputs are not on cuda');
  if (CUDA_TYPE[p.dtype] === undefined)
    return unsupported(`dtype ${p.dtype} (float32, float16 or bfloat16 only)`);
  if (p.bias && !deviceTypeName(p.bias.tensor.dtype as FloatDType)) {
    return unsupported(`bias dtype ${p.bias.tensor.dtype} (float32, float16 or bfloat16 only)`);
  }
  if (p.N > 65535 || p.B > 65535)
    return unsupported(`B=${p.B}, N=${p.N}: the softmax grid allows 65,535 each`);
  const cuda = cudaAvailable();
  return cuda.ok ? SUPPORTED : unsupported(cuda.reason);
}

/** The two matmul shapes of a problem, and how its (b, head group) calls are laid out. */
export function naiveMatmuls(p: AttentionProblem): {
  scores: MatmulShape;
  output: MatmulShape;
  perBatchKvHead: boolean;
} {
  const { T, S, N, K, H, Hv } = p;
  const io = CUDA_TYPE[p.dtype] as number;
  const e = itemSize(p.dtype);
  const G = N / K;
  // With GQA one call covers the G query heads of one KV head; with MHA one call covers all N heads.
  const perBatchKvHead = G > 1;
  const batch = perBatchKvHead ? G : N;
  const probType = p.dtype === 'float32' ? CUDA_DATA_TYPE.R_32F : io;
  const computeType =
    p.dtype === 'float32' && p.float32Precision === 'tf32'
      ? CUBLAS_COMPUTE.F32_FAST_TF32
      : CUBLAS_COMPUTE.F32;
  const kvHeadOffsets = perBatchKvHead ? [H * e] : [];
  const scores: MatmulShape = {
    transA: true,
    transB: false,
    // A = K stored (H × S), ld K·H; B = Qᵀ stored (H × T), ld N·H; D = scoresᵀ (S × T), ld S.
    a: {
      type: io,
      rows: H,
      cols: S,
      ld: K * H,
      batchStride: perBatchKvHead ? 0 : H,
      alignment: commonAlignment([S * K * H * e, H * e, ...kvHeadOffsets]),
    },
    b: {
      type: io,
      rows: H,
      cols: T,
      ld: N * H,
      batchStride: H,
      alignment: commonAlignment([T * N * H * e, H * e]),
    },
    d: {
      type: CUDA_DATA_TYPE.R_32F,
      rows: S,
      cols: T,
      ld: S,
      batchStride: T * S,
      alignment: commonAlignment([T * S * 4]),
    },
    batch,
    computeType,
    scaleType: CUDA_DATA_TYPE.R_32F,
  };
  const pe = p.dtype === 'float32' ? 4 : e;
  const output: MatmulShape = {
    transA: false,
    transB: false,
    // A = Vᵀ stored (Hv × S), ld K·Hv; B = Pᵀ stored (S × T), ld S; D = Oᵀ (Hv × T), ld N·Hv.
    a: {
      type: io,
      rows: Hv,
      cols: S,
      ld: K * Hv,
      batchStride: perBatchKvHead ? 0 : Hv,
      alignment: commonAlignment([S * K * Hv * e, Hv * e]),
    },
    b: {
      type: probType,
      rows: S,
      cols: T,
      ld: S,
      batchStride: T * S,
      alignment: commonAlignment([T * S * pe]),
    },
    d: {
      type: io,
      rows: Hv,
      cols: T,
      ld: N * Hv,
      batchStride: Hv,
      alignment: commonAlignment([T * N * Hv * e, Hv * e]),
    },
    batch,
    computeType,
    scaleType: CUDA_DATA_TYPE.R_32F,
  };
  return { scores, output, perBatchKvHead };
}

/**
 * What one shape keeps: its two matmul plans, its softmax kernel, its variant label and the CUDA graph of
 * its launches. A repeated call finds it by comparing the fields the plans depend on, not by the matmul
 * plans' JSON keys (two `JSON.stringify` of ~300 characters a call).
 */
interface NaivePlan {
  readonly B: number;
  readonly T: number;
  readonly S: number;
  readonly N: number;
  readonly K: number;
  readonly H: number;
  readonly Hv: number;
  readonly dtype: FloatDType;
  readonly precision: string;
  readonly biasDType: string;
  readonly device: number;
  readonly scores: MatmulPlan;
  readonly output: MatmulPlan;
  readonly perBatchKvHead: boolean;
  readonly softmax: SoftmaxKernel;
  readonly variant: string;
  /**
   * The 2·calls + 1 enqueues (calls = B, or B·K with GQA: B and the heads do not share one stride in the
   * B,T,N,H layout, so each matmul is one strided batch per b) captured as one graph once a call's
   * signature repeats: ~8 µs of cuBLASLt host work a matmul on an H100 against one graph launch of 2–3 µs.
   */
  readonly graph: LaunchGraph;
  /** Every value the launches read that can change between calls of this shape (see naiveSignature). */
  readonly signature: Float64Array;
}

/** The last shapes seen, most recent first; a dropped plan's graph is destroyed. */
const KEPT_PLANS = 8;
const kept: NaivePlan[] = [];

function naivePlan(p: AttentionProblem): NaivePlan {
  const device = currentDeviceOrdinal();
  const biasDType = p.bias ? p.bias.tensor.dtype : '';
  const precision = p.dtype === 'float32' ? p.float32Precision : '';
  for (let i = 0; i < kept.length; i++) {
    const k = kept[i];
    if (
      k.B === p.B &&
      k.T === p.T &&
      k.S === p.S &&
      k.N === p.N &&
      k.K === p.K &&
      k.H === p.H &&
      k.Hv === p.Hv &&
      k.dtype === p.dtype &&
      k.precision === precision &&
      k.biasDType === biasDType &&
      k.device === device
    ) {
      if (i > 0) {
        kept.splice(i, 1);
        kept.unshift(k);
      }
      return k;
    }
  }
  const shapes = naiveMatmuls(p);
  const softmax = softmaxKernel(p, p.dtype === 'float32' ? 'float32' : p.dtype);
  const plan: NaivePlan = {
    B: p.B,
    T: p.T,
    S: p.S,
    N: p.N,
    K: p.K,
    H: p.H,
    Hv: p.Hv,
    dtype: p.dtype,
    precision,
    biasDType,
    device,
    scores: matmulPlan(shapes.scores),
    output: matmulPlan(shapes.output),
    perBatchKvHead: shapes.perBatchKvHead,
    softmax,
    variant: `naive-cublaslt-${p.dtype}${precision ? `-${precision}` : ''}+${softmax.variant.name.replace(/\s/g, '')}`,
    graph: newLaunchGraph(true),
    signature: new Float64Array(SIGNATURE_LENGTH),
  };
  kept.unshift(plan);
  if (kept.length > KEPT_PLANS) forgetLaunchGraph((kept.pop() as NaivePlan).graph);
  return plan;
}

const SIGNATURE_LENGTH = 24;

/**
 * Writes into the plan's signature what the launches of this call read beyond the plan's shape: the
 * buffers' addresses (exact as doubles: device addresses stay below 2⁵³), the scale, and the softmax's
 * mask, bias and window fields. Equal signatures mean the captured graph does exactly this call's work.
 */
function naiveSignature(plan: NaivePlan, p: AttentionProblem, b: SoftmaxBuffers, out: bigint): Uint8Array {
  const s = plan.signature;
  s[0] = Number(p.query.buffer.ptr);
  s[1] = Number(p.key.buffer.ptr);
  s[2] = Number(p.value.buffer.ptr);
  s[3] = Number(b.scores);
  s[4] = Number(b.probs);
  s[5] = Number(b.lse);
  s[6] = Number(out);
  s[7] = Number(b.queryLengths);
  s[8] = Number(b.keyValueLengths);
  s[9] = p.bias ? Number(p.bias.tensor.buffer.ptr) : 0;
  s[10] = p.mask ? Number(p.mask.tensor.buffer.ptr) : 0;
  s[11] = p.scale;
  const bs = p.bias?.strides;
  const ms = p.mask?.strides;
  for (let i = 0; i < 4; i++) {
    s[12 + i] = bs ? bs[i] : 0;
    s[16 + i] = ms ? ms[i] : 0;
  }
  s[20] = p.window ? p.window.left : 0;
  s[21] = p.window ? p.window.right : 0;
  s[22] = (p.causal ? 1 : 0) + (p.alignment === 'bottom_right' ? 2 : 0) + (p.window ? 4 : 0);
  s[23] = p.mask ? 1 : 0;
  return new Uint8Array(s.buffer);
}

/** The scores matmuls, the softmax and the output matmuls, in stream order. */
function enqueue(plan: NaivePlan, p: AttentionProblem, buffers: SoftmaxBuffers, out: bigint): void {
  const { B, T, S, N, K, H, Hv } = p;
  const e = itemSize(p.dtype);
  const G = N / K;
  const q = p.query.buffer.ptr;
  const k = p.key.buffer.ptr;
  const v = p.value.buffer.ptr;
  // One call per b (MHA) or per (b, KV head) (GQA): offsets of its first query head and KV head.
  const calls = plan.perBatchKvHead ? B * K : B;
  for (let c = 0; c < calls; c++) {
    const b = plan.perBatchKvHead ? Math.floor(c / K) : c;
    const kh = plan.perBatchKvHead ? c % K : 0;
    const n0 = kh * G;
    runMatmul(
      plan.scores,
      p.scale,
      at(k, (b * S * K + kh) * H, e),
      at(q, (b * T * N + n0) * H, e),
      at(buffers.scores, (b * N + n0) * T * S, 4),
    );
  }
  launchSoftmax(p, plan.softmax, buffers);
  const pe = p.dtype === 'float32' ? 4 : e;
  for (let c = 0; c < calls; c++) {
    const b = plan.perBatchKvHead ? Math.floor(c / K) : c;
    const kh = plan.perBatchKvHead ? c % K : 0;
    const n0 = kh * G;
    runMatmul(
      plan.output,
      1,
      at(v, (b * S * K + kh) * Hv, e),
      at(buffers.probs, (b * N + n0) * T * S, pe),
      at(out, (b * T * N + n0) * Hv, e),
    );
  }
}

function at(base: bigint, elements: number, bytes: number): bigint {
  return base + BigInt(elements * bytes);
}

function run(p: AttentionProblem): BackendOutput {
  const { B, T, S, N, Hv } = p;
  const e = itemSize(p.dtype);
  const plan = naivePlan(p);
  const rows = B * N * T;
  const scores = allocDevice(rows * S * 4);
  const probs = p.dtype === 'float32' ? scores : allocDevice(rows * S * e);
  const lse = p.returnLogSumExp ? allocDevice(B * T * N * 4) : null;
  const out = allocDevice(B * T * N * Hv * e);
  const queryLengths = p.querySeqLengths ? copyInt32ToDevice(p.querySeqLengths) : null;
  const keyValueLengths = p.keyValueSeqLengths ? copyInt32ToDevice(p.keyValueSeqLengths) : null;
  const buffers: SoftmaxBuffers = {
    scores: scores.ptr,
    probs: probs.ptr,
    lse: lse?.ptr ?? 0n,
    queryLengths: queryLengths?.ptr ?? 0n,
    keyValueLengths: keyValueLengths?.ptr ?? 0n,
  };
  try {
    // The lengths were uploaded above, on the stream, before the group: a graph reads them at their addresses.
    const signature = naiveSignature(plan, p, buffers, out.ptr);
    const step = beginLaunchGroup(plan.graph, signature);
    if (step !== GROUP_LAUNCHED) {
      let launched = false;
      try {
        enqueue(plan, p, buffers, out.ptr);
        launched = true;
      } finally {
        // A capture the driver refused ran nothing: the launches again, plainly.
        if (step === GROUP_CAPTURING && !endLaunchGroup(plan.graph, signature, launched) && launched)
          enqueue(plan, p, buffers, out.ptr);
      }
    }
    return {
      output: Tensor.fromDeviceBuffer(out, [B, T, N, Hv], p.dtype),
      logSumExp: lse ? Tensor.fromDeviceBuffer(lse, [B, T, N], 'float32') : undefined,
      variant: plan.variant,
    };
  } catch (error) {
    out.release();
    lse?.release();
    throw error;
  } finally {
    // Stream order makes these safe to reuse at once: later work on the stream runs after the matmuls.
    // Released in the reverse of their allocation: the pool's free lists are last-in first-out, so the
    // next call of this shape gets the same addresses (the same graph signature). Released in allocation
    // order, two blocks of one size (the two length arrays) swap addresses every call and never capture.
    keyValueLengths?.release();
    queryLengths?.release();
    if (probs !== scores) probs.release();
    scores.release();
  }
}

/** The plan is the support check alone: the matmul plans are cached per shape in matmul.ts. */
export const cudaNaiveBackend: AttentionBackend<null> = {
  name: 'naive',
  device: 'cuda',
  plan: (p) => {
    const support = naiveSupport(p);
    return support.ok ? NO_PLAN : support;
  },
  run: (_plan, p) => run(p),
};
