/**
 * The backward's plan for a problem: its variant (what specialises the three kernels of
 * backward-source.ts, and the key that names them) or why it cannot run, with every WebGPU limit
 * checked before a dispatch.
 */
import { itemSize } from '../../tensor/dtype.js';
import type { BackwardProblem } from '../backward-problem.js';
import { paddedBytes } from './memory.js';
import { MAX_HEAD_DIM, MODIFIERS_REASON } from './plan.js';
import type { WebgpuLimits } from './runtime.js';

type KernelDType = 'float32' | 'float16' | 'bfloat16';

export interface BackwardVariant {
  readonly dtype: KernelDType;
  /** The forward output's dtype (the query's, or float32 for D from the unrounded output). */
  readonly output: KernelDType;
  readonly H: number;
  readonly Hv: number;
  readonly bias: KernelDType | null;
  readonly mask: boolean;
  readonly lengths: boolean;
}

export type BackwardPlan =
  | { readonly ok: true; readonly variant: BackwardVariant }
  | { readonly ok: false; readonly reason: string };

function isKernelDType(dtype: string): dtype is KernelDType {
  return dtype === 'float32' || dtype === 'float16' || dtype === 'bfloat16';
}

export function backwardKey(v: BackwardVariant): string {
  const flags = [
    v.output !== v.dtype ? `o-${v.output}` : '',
    v.bias ? `bias-${v.bias}` : '',
    v.mask ? 'mask' : '',
    v.lengths ? 'lengths' : '',
  ].filter(Boolean);
  return `webgpu-backward-rows-${v.dtype}-h${v.H}-hv${v.Hv}${flags.length ? `-${flags.join('-')}` : ''}`;
}

/** Bytes of the (B,N,T,S) float32 scratch dBias is summed from. */
export function dsScratchBytes(p: Pick<BackwardProblem, 'B' | 'N' | 'T' | 'S'>): number {
  return p.B * p.N * p.T * p.S * 4;
}

export function planBackward(p: BackwardProblem, limits: WebgpuLimits): BackwardPlan {
  const refuse = (reason: string): BackwardPlan => ({ ok: false, reason });
  if (p.modifiers || p.blockMask) return refuse(MODIFIERS_REASON);
  if (!isKernelDType(p.dtype))
    return refuse(`${p.dtype} inputs (the kernels read float32, float16 and bfloat16)`);
  if (!isKernelDType(p.output.dtype)) return refuse(`a ${p.output.dtype} output`);
  if (p.logSumExp.dtype !== 'float32') return refuse(`a ${p.logSumExp.dtype} logSumExp (float32 on webgpu)`);
  const bias = p.bias ? p.bias.tensor.dtype : null;
  if (bias !== null && !isKernelDType(bias)) return refuse(`a ${bias} bias`);
  if (p.dtype !== 'float32' && (p.H % 2 !== 0 || p.Hv % 2 !== 0)) {
    return refuse(
      `${p.dtype} gradients are stored two values to a 32-bit word, so H and Hv must be even (H=${p.H}, Hv=${p.Hv})`,
    );
  }
  if (p.H > MAX_HEAD_DIM || p.Hv > MAX_HEAD_DIM)
    return refuse(`head dims up to ${MAX_HEAD_DIM} (H=${p.H}, Hv=${p.Hv})`);
  if (p.N % p.K !== 0) return refuse(`N=${p.N} is not a multiple of K=${p.K}`);
  const grid = {
    'query rows T/64': Math.ceil(p.T / 64),
    'keys S/64': Math.ceil(p.S / 64),
    'heads N': p.N,
    'batch B': p.B,
  };
  for (const [what, count] of Object.entries(grid)) {
    if (count > limits.maxComputeWorkgroupsPerDimension) {
      return refuse(
        `${count} ${what} exceed maxComputeWorkgroupsPerDimension (${limits.maxComputeWorkgroupsPerDimension})`,
      );
    }
  }
  const size = itemSize(p.dtype);
  const buffers: [string, number][] = [
    ['query', p.query.byteLength],
    ['key', p.key.byteLength],
    ['value', p.value.byteLength],
    ['output', p.output.byteLength],
    ['dOutput', p.dOutput.byteLength],
    ['dQuery', p.B * p.T * p.N * p.H * size],
  ];
  if (p.bias) buffers.push(['the dBias scratch (B·N·T·S float32)', dsScratchBytes(p)]);
  if (p.mask) buffers.push(['mask', p.mask.tensor.byteLength]);
  for (const [name, bytes] of buffers) {
    const padded = paddedBytes(bytes);
    if (padded > limits.maxStorageBufferBindingSize) {
      return refuse(
        `${name} takes ${padded} bytes, past maxStorageBufferBindingSize (${limits.maxStorageBufferBindingSize})`,
      );
    }
    if (padded > limits.maxBufferSize)
      return refuse(`${name} takes ${padded} bytes, past maxBufferSize (${limits.maxBufferSize})`);
  }
  // dq binds q, k, v, dO, lse, O, dQ, D, the scratch, bias, mask, lengths.
  const storage =
    8 + (p.bias ? 2 : 0) + (p.mask ? 1 : 0) + (p.querySeqLengths || p.keyValueSeqLengths ? 1 : 0);
  if (storage > limits.maxStorageBuffersPerShaderStage) {
    return refuse(
      `${storage} storage buffers exceed maxStorageBuffersPerShaderStage (${limits.maxStorageBuffersPerShaderStage})`,
    );
  }
  return {
    ok: true,
    variant: {
      dtype: p.dtype,
      output: p.output.dtype,
      H: p.H,
      Hv: p.Hv,
      bias,
      mask: p.mask !== null,
      lengths: p.querySeqLengths !== null || p.keyValueSeqLengths !== null,
    },
  };
}
