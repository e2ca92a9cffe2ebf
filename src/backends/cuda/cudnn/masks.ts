/**
 * What the cuDNN graph cannot take, prepared on the device around it (src/kernels/cudnn/masks.cu):
 *
 * - a boolean mask, or a bias broadcast over T or S, becomes one additive bias (D0, D1, T, S) in the
 *   inputs' dtype before cuDNN runs: the graph is the ordinary bias graph, so its plan is cached and
 *   shared with bias problems of the same dims; only this buffer is new per call;
 * - rows that see no key get zeros and log-sum-exp −inf after cuDNN ran.
 *
 * Both are enqueued on attnlab's stream: nothing waits for the GPU and nothing comes back to the host.
 */

import type { DeviceBuffer } from '../../../tensor/storage.js';
import type { AttentionProblem, BroadcastOperand } from '../../problem.js';
import { loadKernels } from '../runtime/compile.js';
import { i32, i64, type KernelArg, launchKernel, ptr, u32 } from '../runtime/launch.js';
import { allocDevice } from '../runtime/memory.js';
import type { SdpaFeatures } from './features.js';

const THREADS = 256;
const WARPS = THREADS / 32;

/**
 * The value written where the mask drops a pair, as 16 raw bits: −2^100 in bfloat16, −65504 (the
 * lowest finite) in float16. Finite on purpose (masks.cu says why); far enough below any real logit
 * that exp(fill − max) is exactly 0 in float32 once a row has a visible key.
 */
export const MASK_FILL_BITS: Record<'float16' | 'bfloat16', number> = {
  bfloat16: 0xf180, // sign 1, exponent 127 + 100, mantissa 0
  float16: 0xfbff,
};

const NAMES = ['attnlab_cudnn_bias_from_mask', 'attnlab_cudnn_empty_rows'] as const;
let functions: Record<(typeof NAMES)[number], bigint> | undefined;

function kernels(): Record<(typeof NAMES)[number], bigint> {
  if (functions) return functions;
  const module = loadKernels({ file: 'cudnn/masks.cu', kernels: NAMES });
  functions = Object.fromEntries(NAMES.map((name) => [name, module.functions.get(name)!])) as Record<
    (typeof NAMES)[number],
    bigint
  >;
  return functions;
}

const NO_OPERAND: BroadcastOperand['strides'] = [0, 0, 0, 0];

function operandArgs(operand: BroadcastOperand | null): KernelArg[] {
  const strides = operand ? operand.strides : NO_OPERAND;
  return [ptr(operand ? operand.tensor.buffer.ptr : 0n), ...strides.map((s) => i64(s))];
}

/**
 * The additive bias cuDNN reads for `p` (mask and bias combined, broadcasts expanded over T and S,
 * a folded bottom-right bound applied), shaped as `f.bias` says; the caller releases it after
 * enqueuing cuDNN. `lengths` are the device sequence-length tensors (null without padding).
 */
export function biasFromMask(
  p: AttentionProblem,
  f: SdpaFeatures,
  foldedRight: number | null,
  lengths: readonly [bigint, bigint] | null,
): DeviceBuffer {
  if (!f.bias) throw new Error('biasFromMask: the graph has no bias tensor');
  const [D0, D1, T, S] = f.bias.dims;
  const out = allocDevice(D0 * D1 * T * S * 2);
  launchKernel(
    kernels().attnlab_cudnn_bias_from_mask,
    { grid: [D0 * D1 * T, 1, 1], block: [THREADS, 1, 1] },
    [
      ptr(out.ptr),
      i64(D1),
      i64(T),
      i64(S),
      ...operandArgs(p.mask),
      ...operandArgs(p.bias),
      u32(MASK_FILL_BITS[f.dtype]),
      i32(foldedRight !== null ? 1 : 0),
      i64(foldedRight ?? 0),
      ptr(lengths && p.querySeqLengths ? lengths[0] : 0n),
      ptr(lengths && p.keyValueSeqLengths ? lengths[1] : 0n),
    ],
  );
  return out;
}

/** Where an output row (b, t, n) of the log-sum-exp lives, as element strides. */
function lseStrides(f: SdpaFeatures): [number, number, number] {
  const { T, N } = f;
  return f.stats === 'bnt' ? [N * T, 1, T] : [T * N, N, 1];
}

/**
 * Zeros in O and −inf in the log-sum-exp for every row of `p` that sees no key, after cuDNN.
 * `lengths` are the device sequence-length tensors the graph read (null without padding).
 */
export function fixEmptyRows(
  p: AttentionProblem,
  f: SdpaFeatures,
  foldedRight: number | null,
  output: bigint,
  lse: bigint | undefined,
  lengths: readonly [bigint, bigint] | null,
): void {
  const { B, T, S, N, Hv } = f;
  const right = f.right ?? foldedRight;
  const [sb, st, sn] = lseStrides(f);
  const mask = p.mask;
  const fields = [
    ptr(output),
    ptr(lse ?? 0n),
    i64(sb),
    i64(st),
    i64(sn),
    ptr(lengths ? lengths[0] : 0n),
    ptr(lengths ? lengths[1] : 0n),
    ...operandArgs(mask),
    ...[B, T, S, N, Hv].map((x) => i64(x)),
    i64(right ?? 0),
    i64(f.left ?? 0),
    i32(right !== null ? 1 : 0),
    i32(f.left !== null ? 1 : 0),
    i32(f.alignment === 'bottom_right' ? 1 : 0),
  ] as { type: 'ptr' | 'i64' | 'i32'; value: number | bigint }[];
  const rows = B * T * N;
  launchKernel(
    kernels().attnlab_cudnn_empty_rows,
    { grid: [Math.ceil(rows / WARPS), 1, 1], block: [THREADS, 1, 1] },
    [{ type: 'struct', fields }],
  );
}
