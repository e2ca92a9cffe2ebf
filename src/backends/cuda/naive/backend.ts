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
 * batch stride 0.
 */

import { type FloatDType, itemSize } from '../../../tensor/dtype.js';
import { Tensor } from '../../../tensor/tensor.js';
import { type AttentionBackend, NO_PLAN, type Support } from '../../backend.js';
import type { AttentionProblem, BackendOutput } from '../../problem.js';
import { CUBLAS_COMPUTE, CUDA_DATA_TYPE } from '../ffi/cublaslt.js';
import { cudaAvailable } from '../runtime/context.js';
import { commonAlignment, type MatmulShape, matmulPlan, runMatmul } from '../runtime/matmul.js';
import { allocDevice, copyInt32ToDevice } from '../runtime/memory.js';
import { deviceTypeName, launchSoftmax } from './softmax.js';

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

function run(p: AttentionProblem): BackendOutput {
  const { B, T, S, N, K, H, Hv } = p;
  const e = itemSize(p.dtype);
  const G = N / K;
  const shapes = naiveMatmuls(p);
  const scoresPlan = matmulPlan(shapes.scores);
  const outputPlan = matmulPlan(shapes.output);
  const rows = B * N * T;
  const scores = allocDevice(rows * S * 4);
  const probs = p.dtype === 'float32' ? scores : allocDevice(rows * S * e);
  const lse = p.returnLogSumExp ? allocDevice(B * T * N * 4) : null;
  const out = allocDevice(B * T * N * Hv * e);
  const upload = (lengths: Int32Array | null) => (lengths ? copyInt32ToDevice(lengths) : null);
  const queryLengths = upload(p.querySeqLengths);
  const keyValueLengths = upload(p.keyValueSeqLengths);
  const q = p.query.buffer.ptr;
  const k = p.key.buffer.ptr;
  const v = p.value.buffer.ptr;
  const at = (base: bigint, elements: number, bytes: number) => base + BigInt(elements * bytes);
  try {
    // One call per b (MHA) or per (b, KV head) (GQA): offsets of its first query head and KV head.
    const calls = shapes.perBatchKvHead ? B * K : B;
    for (let c = 0; c < calls; c++) {
      const b = shapes.perBatchKvHead ? Math.floor(c / K) : c;
      const kh = shapes.perBatchKvHead ? c % K : 0;
      const n0 = kh * G;
      runMatmul(
        scoresPlan,
        p.scale,
        at(k, (b * S * K + kh) * H, e),
        at(q, (b * T * N + n0) * H, e),
        at(scores.ptr, (b * N + n0) * T * S, 4),
      );
    }
    const softmax = launchSoftmax(p, p.dtype === 'float32' ? 'float32' : p.dtype, {
      scores: scores.ptr,
      probs: probs.ptr,
      lse: lse?.ptr ?? 0n,
      queryLengths: queryLengths?.ptr ?? 0n,
      keyValueLengths: keyValueLengths?.ptr ?? 0n,
    });
    const pe = p.dtype === 'float32' ? 4 : e;
    for (let c = 0; c < calls; c++) {
      const b = shapes.perBatchKvHead ? Math.floor(c / K) : c;
      const kh = shapes.perBatchKvHead ? c % K : 0;
      const n0 = kh * G;
      runMatmul(
        outputPlan,
        1,
        at(v, (b * S * K + kh) * Hv, e),
        at(probs.ptr, (b * N + n0) * T * S, pe),
        at(out.ptr, (b * T * N + n0) * Hv, e),
      );
    }
    const precision = p.dtype === 'float32' ? `-${p.float32Precision}` : '';
    return {
      output: Tensor.fromDeviceBuffer(out, [B, T, N, Hv], p.dtype),
      logSumExp: lse ? Tensor.fromDeviceBuffer(lse, [B, T, N], 'float32') : undefined,
      variant: `naive-cublaslt-${p.dtype}${precision}+${softmax.name.replace(/\s/g, '')}`,
    };
  } catch (error) {
    out.release();
    lse?.release();
    throw error;
  } finally {
    // Stream order makes these safe to reuse at once: later work on the stream runs after the matmuls.
    scores.release();
    probs.release();
    queryLengths?.release();
    keyValueLengths?.release();
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
