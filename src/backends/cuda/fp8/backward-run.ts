/**
 * One FP8 attention backward on the GPU, after an FP8 forward step that kept its residuals:
 *   1. the backward's scalar block from the host: the forward's descales (1/scale, as its kernels
 *      round them), scale_s, and this step's dO, dP, dQ, dK, dV scales and descales; amax slots 0;
 *   2. dO (bf16) → dO8 in the gradient type, recording amax_dO (gradients.cu);
 *   3. cuDNN's FP8 backward graph (backward-graph.ts) writes dQ8, dK8, dV8 and amax_dQ/dK/dV/dP;
 *   4. dQ8, dK8, dV8 → bf16 (gradients.cu);
 *   5. the block is read back (one wait for the GPU) for the five amax values the recipe records.
 * With padding the FP8 gradients are zeroed first: cuDNN writes only valid rows (the GEMM overrides).
 */
import { UnsupportedError } from '../../../errors.js';
import { Tensor } from '../../../tensor/tensor.js';
import type { Fp8BackwardOutput, Fp8BackwardProblem } from '../../fp8-backward-problem.js';
import { sequenceLengthsBuffer } from '../cudnn/execute.js';
import { allocDevice, copyToDevice, copyToHost, fillDevice32 } from '../runtime/memory.js';
import {
  BACKWARD_BLOCK_BYTES,
  type BackwardScalarName,
  buildFp8BackwardGraph,
  type Fp8BackwardFeatures,
  BACKWARD_SLOTS as SLOT,
} from './backward-graph.js';
import { launchDequantiseGradients, launchQuantiseGradient } from './gradient-kernels.js';
import { executeFp8Plan, fp8PlanFor } from './plan.js';

export function backwardFeatures(b: Fp8BackwardProblem): Fp8BackwardFeatures {
  const { B, T, S, N, K, H, causal } = b.problem;
  const padding = b.problem.querySeqLengths !== null || b.problem.keyValueSeqLengths !== null;
  const gradient = b.dtype8 === 'float8_e5m2' ? 'fp8_e5m2' : 'fp8_e4m3';
  return { B, T, S, N, K, H, causal, padding, gradient };
}

/** The block's floats: each slot's value at its first float. */
function scalarBlock(b: Fp8BackwardProblem): Float32Array {
  const block = new Float32Array(BACKWARD_BLOCK_BYTES / 4);
  const set = (name: BackwardScalarName, value: number) => {
    block[SLOT[name] * 4] = value;
  };
  const inverse = (scale: number) => Math.fround(1 / Math.fround(scale));
  const { forwardScales: f, scales: s } = b;
  set('descaleQ', inverse(f.q));
  set('descaleK', inverse(f.k));
  set('descaleV', inverse(f.v));
  set('descaleO', inverse(f.o));
  set('descaleS', inverse(f.s));
  set('scaleS', f.s);
  set('scaleDO', s.dO);
  set('descaleDO', inverse(s.dO));
  set('scaleDP', s.dP);
  set('descaleDP', inverse(s.dP));
  set('scaleDQ', s.dQ);
  set('scaleDK', s.dK);
  set('scaleDV', s.dV);
  return block;
}

export function runCudaFp8Backward(b: Fp8BackwardProblem): Fp8BackwardOutput {
  const { residuals: r } = b;
  if (!r.logSumExp) throw new UnsupportedError('cudnn-fp8 backward', 'the forward kept no statistics');
  const f = backwardFeatures(b);
  const plan = fp8PlanFor(`backward ${JSON.stringify(f)}`, 'fp8 backward', () => buildFp8BackwardGraph(f));
  const { B, T, S, N, K, H } = f;
  const [queryElements, keyValueElements] = [B * T * N * H, B * S * K * H];
  const block = copyToDevice(new Uint8Array(scalarBlock(b).buffer));
  const dO8 = allocDevice(queryElements);
  const codes = [allocDevice(queryElements), allocDevice(keyValueElements), allocDevice(keyValueElements)];
  const p = b.problem;
  const lengths = f.padding
    ? [sequenceLengthsBuffer(p.querySeqLengths, B, T), sequenceLengthsBuffer(p.keyValueSeqLengths, B, S)]
    : null;
  const outputs = [queryElements, keyValueElements, keyValueElements].map((n) => allocDevice(n * 2));
  try {
    if (f.padding) for (const c of codes) fillDevice32(c, 0);
    launchQuantiseGradient(b.dOutput.buffer.ptr, dO8.ptr, queryElements, block.ptr, b.dtype8);
    executeFp8Plan(
      plan,
      {
        q8: r.q8.buffer.ptr,
        k8: r.k8.buffer.ptr,
        v8: r.v8.buffer.ptr,
        o8: r.o8.buffer.ptr,
        stats: r.logSumExp.buffer.ptr,
        dO8: dO8.ptr,
        dQ8: codes[0].ptr,
        dK8: codes[1].ptr,
        dV8: codes[2].ptr,
        seqLenQ: lengths?.[0].ptr,
        seqLenKv: lengths?.[1].ptr,
        scalarBlock: block.ptr,
      },
      p.scale,
    );
    launchDequantiseGradients(
      [codes[0].ptr, codes[1].ptr, codes[2].ptr],
      [outputs[0].ptr, outputs[1].ptr, outputs[2].ptr],
      queryElements,
      keyValueElements,
      block.ptr,
      b.dtype8,
    );
    const values = new Float32Array(BACKWARD_BLOCK_BYTES / 4);
    copyToHost(block, new Uint8Array(values.buffer));
    const at = (name: BackwardScalarName) => values[SLOT[name] * 4];
    const shapes = [p.query.shape, p.key.shape, p.value.shape];
    const [dQuery, dKey, dValue] = outputs.map((o, i) => Tensor.fromDeviceBuffer(o, shapes[i], 'bfloat16'));
    const [dQ8, dK8, dV8] = codes.map((c, i) => Tensor.fromDeviceBuffer(c, shapes[i], b.dtype8));
    return {
      dQuery,
      dKey,
      dValue,
      gradients8: { dQuery: dQ8, dKey: dK8, dValue: dV8 },
      amax: { dO: at('amaxDO'), dP: at('amaxDP'), dQ: at('amaxDQ'), dK: at('amaxDK'), dV: at('amaxDV') },
      device: 'cuda',
      variant: plan.variant,
    };
  } catch (error) {
    for (const buffer of [...codes, ...outputs]) buffer.release();
    throw error;
  } finally {
    // Stream-ordered pool: later users of these blocks are enqueued after this call's kernels.
    for (const buffer of [block, dO8, ...(lengths ?? [])]) buffer.release();
  }
}
