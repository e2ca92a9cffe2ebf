/**
 * The naive GPU backward ('naive' on 'cuda'): the textbook gradients with every (B,N,T,S) matrix
 * materialised, so its O(T²) memory shows in memoryStats (12 bytes per score in bf16/fp16: scores and
 * dP/dS in float32, P and dS in the operand dtype; 8 in float32).
 *
 *   1. scores = scale·Q·Kᵀ (float32)     cuBLASLt, the forward's first product (recomputed)
 *   2. dP = dO·Vᵀ (float32)              cuBLASLt, the same product over V and dO
 *   3. P = softmax(scores + bias), D = Σ P·dP, dS = P∘(dP − D)   src/kernels/naive/softmax_backward.cu
 *      (the softmax recomputed per row, in float64 for float32 inputs, not from the float32
 *      log-sum-exp: see there)
 *   4. dV_n = Pᵀ·dO, dK_n = scale·dSᵀ·Q  cuBLASLt per query head, float32 (B,S,N,·)
 *   5. dQ = scale·dS·K                   cuBLASLt, the forward's second product over K and dS
 *   Steps 4–5 read Q, K and dO with their non-finite elements zeroed (their rows' dS already carry
 *   them; a GEMM would also multiply them by the zero weights of unseen pairs, 0·NaN = NaN), and a
 *   non-finite dO element is then added back into dV at its nonzero weights: the NaN rule of
 *   docs/guide/gradient-accuracy.md, exactly as the reference.
 *   6. dK, dV = Σ over each KV head's G query heads, rounded once; dBias = Σ dS over the bias's
 *      broadcast dimensions                                 softmax_backward.cu
 *
 * Per (b, n) every matrix is a strided view of the BTNH tensors, as in the forward (backend.ts);
 * the calls are per b (MHA: all heads batched) or per (b, KV head) (GQA: its G heads, K/V stride 0).
 * Plain GEMMs and per-element kernels: the result does not depend on scheduling (deterministic).
 */

import { type FloatDType, itemSize } from '../../../tensor/dtype.js';
import { Tensor } from '../../../tensor/tensor.js';
import { NO_PLAN, type Support, unsupported } from '../../backend.js';
import type { BackwardBackend } from '../../backward-backend.js';
import type { BackwardOutput, BackwardProblem } from '../../backward-problem.js';
import { CUDA_DATA_TYPE } from '../ffi/cublaslt.js';
import { commonAlignment, type MatmulShape, matmulPlan, runMatmul } from '../runtime/matmul.js';
import { allocDevice, copyInt32ToDevice } from '../runtime/memory.js';
import { naiveMatmuls, naiveSupport } from './backend.js';
import {
  launchBiasGrad,
  launchGroupSum,
  launchNonFiniteDv,
  launchSoftmaxBackward,
  launchZeroNonFinite,
} from './softmax-backward.js';

function supports(p: BackwardProblem): Support {
  if (p.logSumExp.dtype !== 'float32') return unsupported(`logSumExp ${p.logSumExp.dtype} (float32 on cuda)`);
  return naiveSupport(p);
}

/**
 * dW_n (S × width) = alpha · Xᵀ · dY_n with X the (T × S) P or dS of head n and dY_n its (T × width)
 * dO or Q rows. Column-major: dWᵀ (width × S) = dYᵀ (width × T, ld N·width) · X (stored S × T, ld S,
 * transposed); the result goes to a float32 (B,S,N,width) buffer, one head per batch entry.
 */
function weightGradient(
  p: BackwardProblem,
  width: number,
  xType: number,
  xBytes: number,
  yType: number,
): MatmulShape {
  const { T, S, N } = p;
  const e = itemSize(p.dtype);
  const scores = naiveMatmuls(p).scores;
  const perBatchKvHead = N / p.K > 1;
  return {
    transA: false,
    transB: true,
    a: {
      type: yType,
      rows: width,
      cols: T,
      ld: N * width,
      batchStride: width,
      alignment: commonAlignment([T * N * width * e, width * e]),
    },
    b: {
      type: xType,
      rows: S,
      cols: T,
      ld: S,
      batchStride: T * S,
      alignment: commonAlignment([T * S * xBytes]),
    },
    d: {
      type: CUDA_DATA_TYPE.R_32F,
      rows: width,
      cols: S,
      ld: N * width,
      batchStride: width,
      alignment: commonAlignment([S * N * width * 4, width * 4]),
    },
    batch: perBatchKvHead ? N / p.K : N,
    computeType: scores.computeType,
    scaleType: CUDA_DATA_TYPE.R_32F,
  };
}

function run(p: BackwardProblem): BackwardOutput {
  const { B, T, S, N, K, H, Hv } = p;
  const e = itemSize(p.dtype);
  const G = N / K;
  const forward = naiveMatmuls(p);
  // The forward's products with other operands: dP = dO·Vᵀ is "scores" with H → Hv, and
  // dQ = dS·K is "output" with Hv → H.
  const scoresPlan = matmulPlan(forward.scores);
  const dPPlan = matmulPlan(naiveMatmuls({ ...p, H: Hv }).scores);
  const dQPlan = matmulPlan(naiveMatmuls({ ...p, Hv: H }).output);
  const lowDType: FloatDType = p.dtype === 'float32' ? 'float32' : p.dtype;
  const lowBytes = itemSize(lowDType);
  const lowType = forward.output.b.type;
  const io = forward.scores.b.type;
  const dVPlan = matmulPlan(weightGradient(p, Hv, lowType, lowBytes, io));
  const dKPlan = matmulPlan(weightGradient(p, H, lowType, lowBytes, io));

  const scoreCount = B * N * T * S;
  const float32 = p.dtype === 'float32';
  const scores = allocDevice(scoreCount * 4);
  const dScores = allocDevice(scoreCount * 4);
  const probs = float32 ? scores : allocDevice(scoreCount * lowBytes);
  const dScoresLow = float32 ? null : allocDevice(scoreCount * lowBytes);
  const dKHeads = allocDevice(B * S * N * H * 4);
  const dVHeads = allocDevice(B * S * N * Hv * 4);
  const dQ = allocDevice(B * T * N * H * e);
  const dK = allocDevice(B * S * K * H * e);
  const dV = allocDevice(B * S * K * Hv * e);
  // Q, K and dO for the weight-gradient GEMMs, non-finite elements zeroed (see the header).
  const [qCount, kCount, dOCount] = [B * T * N * H, B * S * K * H, B * T * N * Hv];
  const finiteQ = allocDevice(qCount * e);
  const finiteK = allocDevice(kCount * e);
  const finiteDO = allocDevice(dOCount * e);
  const dBias = p.bias ? allocDevice(p.bias.tensor.size * itemSize(p.bias.tensor.dtype as FloatDType)) : null;
  const upload = (lengths: Int32Array | null) => (lengths ? copyInt32ToDevice(lengths) : null);
  const queryLengths = upload(p.querySeqLengths);
  const keyValueLengths = upload(p.keyValueSeqLengths);
  const at = (base: bigint, elements: number, bytes: number) => base + BigInt(elements * bytes);
  const [q, k, v, dO] = [p.query, p.key, p.value, p.dOutput].map((t) => t.buffer.ptr);
  const [qF, kF, dOF] = [finiteQ.ptr, finiteK.ptr, finiteDO.ptr];
  const calls = G > 1 ? B * K : B;
  const eachCall = (visit: (b: number, kh: number, n0: number) => void) => {
    for (let c = 0; c < calls; c++) {
      const b = G > 1 ? Math.floor(c / K) : c;
      const kh = G > 1 ? c % K : 0;
      visit(b, kh, kh * G);
    }
  };
  try {
    eachCall((b, kh, n0) => {
      const scoreRow = (b * N + n0) * T * S;
      runMatmul(
        scoresPlan,
        p.scale,
        at(k, (b * S * K + kh) * H, e),
        at(q, (b * T * N + n0) * H, e),
        at(scores.ptr, scoreRow, 4),
      );
      runMatmul(
        dPPlan,
        1,
        at(v, (b * S * K + kh) * Hv, e),
        at(dO, (b * T * N + n0) * Hv, e),
        at(dScores.ptr, scoreRow, 4),
      );
    });
    const softmax = launchSoftmaxBackward(p, lowDType, {
      scores: scores.ptr,
      probs: probs.ptr,
      lse: p.logSumExp.buffer.ptr,
      queryLengths: queryLengths?.ptr ?? 0n,
      keyValueLengths: keyValueLengths?.ptr ?? 0n,
      dScores: dScores.ptr,
      dScoresLow: dScoresLow?.ptr ?? 0n,
    });
    const dSLow = dScoresLow ?? dScores;
    launchZeroNonFinite(q, qF, qCount, p.dtype);
    launchZeroNonFinite(k, kF, kCount, p.dtype);
    launchZeroNonFinite(dO, dOF, dOCount, p.dtype);
    eachCall((b, kh, n0) => {
      const scoreRow = (b * N + n0) * T * S;
      runMatmul(
        dVPlan,
        1,
        at(dOF, (b * T * N + n0) * Hv, e),
        at(probs.ptr, scoreRow, lowBytes),
        at(dVHeads.ptr, (b * S * N + n0) * Hv, 4),
      );
      runMatmul(
        dKPlan,
        p.scale,
        at(qF, (b * T * N + n0) * H, e),
        at(dSLow.ptr, scoreRow, lowBytes),
        at(dKHeads.ptr, (b * S * N + n0) * H, 4),
      );
      runMatmul(
        dQPlan,
        p.scale,
        at(kF, (b * S * K + kh) * H, e),
        at(dSLow.ptr, scoreRow, lowBytes),
        at(dQ.ptr, (b * T * N + n0) * H, e),
      );
    });
    launchNonFiniteDv(p, lowDType, probs.ptr, dVHeads.ptr);
    launchGroupSum(dKHeads.ptr, dK.ptr, { rows: B * S, K, G, D: H }, p.dtype);
    launchGroupSum(dVHeads.ptr, dV.ptr, { rows: B * S, K, G, D: Hv }, p.dtype);
    if (dBias) launchBiasGrad(p, dScores.ptr, dBias.ptr);
    const precision = float32 ? `-${p.float32Precision}` : '';
    return {
      dQuery: Tensor.fromDeviceBuffer(dQ, [B, T, N, H], p.dtype),
      dKey: Tensor.fromDeviceBuffer(dK, [B, S, K, H], p.dtype),
      dValue: Tensor.fromDeviceBuffer(dV, [B, S, K, Hv], p.dtype),
      dBias:
        dBias && p.bias
          ? Tensor.fromDeviceBuffer(dBias, p.bias.tensor.shape, p.bias.tensor.dtype)
          : undefined,
      variant: `naive-backward-cublaslt-${p.dtype}${precision}+${softmax.replace(/\s/g, '')}`,
    };
  } catch (error) {
    for (const buffer of [dQ, dK, dV, dBias]) buffer?.release();
    throw error;
  } finally {
    // Stream order makes these safe to reuse at once: later work on the stream runs after these kernels.
    for (const buffer of [
      scores,
      dScores,
      probs,
      dScoresLow,
      dKHeads,
      dVHeads,
      finiteQ,
      finiteK,
      finiteDO,
      queryLengths,
      keyValueLengths,
    ])
      buffer?.release();
  }
}

export const cudaNaiveBackward: BackwardBackend<null> = {
  name: 'naive',
  device: 'cuda',
  plan: (p) => {
    const support = supports(p);
    return support.ok ? NO_PLAN : support;
  },
  run: (_plan, p) => run(p),
};
