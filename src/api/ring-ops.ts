/**
 * The host (CPU) RingOps: slices by copying rows, merges in float64. The CUDA version is
 * backends/cuda/ring/ops.ts; the runner (ring-run.ts) only sees the interface (backends/ring-backend.ts).
 */

import type { Accumulator, RingOps } from '../backends/ring-backend.js';
import { allocHost } from '../tensor/checks.js';
import { Tensor } from '../tensor/tensor.js';

interface HostAccumulator extends Accumulator {
  readonly output: Float64Array;
  readonly lse: Float64Array;
}

/** Merges (o, l) of one row into `out`/`lse` at the given offsets: the rule of RingOps.merge. */
export function mergeRow(
  out: Float64Array,
  lse: Float64Array,
  at: number,
  lseAt: number,
  part: Float64Array,
  partAt: number,
  partLse: number,
  width: number,
): void {
  const mine = lse[lseAt];
  if (partLse === -Infinity) return;
  if (Number.isNaN(partLse) || Number.isNaN(mine)) {
    lse[lseAt] = Number.NaN;
    for (let h = 0; h < width; h++) out[at + h] = Number.NaN;
    return;
  }
  const m = Math.max(mine, partLse);
  const a = Math.exp(mine - m);
  const b = Math.exp(partLse - m);
  for (let h = 0; h < width; h++) {
    // A −∞ accumulator holds zeros, and 0·a is 0 even for a = 0: no NaN from an empty start.
    out[at + h] = (out[at + h] * a + part[partAt + h] * b) / (a + b);
  }
  lse[lseAt] = m + Math.log(a + b);
}

export const hostRingOps: RingOps = {
  gather(pieces, b0, nb) {
    const [, , heads, dim] = pieces[0].tensor.shape;
    const row = heads * dim;
    const total = pieces.reduce((sum, p) => sum + p.rows.length, 0);
    const dst = allocHost(pieces[0].tensor.dtype, [nb, total, heads, dim]);
    for (let b = 0; b < nb; b++) {
      let at = b * total * row;
      for (const { tensor, rows } of pieces) {
        const from = ((b0 + b) * tensor.shape[1] + rows.start) * row;
        dst.set(tensor.data.subarray(from, from + rows.length * row) as never, at);
        at += rows.length * row;
      }
    }
    return Tensor.fromRaw(dst, [nb, total, heads, dim], pieces[0].tensor.dtype);
  },
  accumulator(shape) {
    const { B, T, N, Hv } = shape;
    const acc: HostAccumulator = {
      shape,
      output: new Float64Array(B * T * N * Hv),
      lse: new Float64Array(B * T * N).fill(-Infinity),
    };
    return acc;
  },
  merge(accIn, b0, output, logSumExp, rowStart) {
    const acc = accIn as HostAccumulator;
    const { T, N, Hv } = acc.shape;
    const [nb, rows] = output.shape;
    const o = output.toFloat64Array();
    const l = logSumExp.toFloat64Array();
    for (let b = 0; b < nb; b++)
      for (let i = 0; i < rows; i++)
        for (let n = 0; n < N; n++) {
          const row = ((b0 + b) * T + rowStart + i) * N + n;
          const part = (b * rows + i) * N + n;
          mergeRow(acc.output, acc.lse, row * Hv, row, o, part * Hv, l[part], Hv);
        }
  },
  finish(accIn, dtype) {
    const acc = accIn as HostAccumulator;
    const { B, T, N, Hv } = acc.shape;
    return {
      output: Tensor.fromArray(acc.output, [B, T, N, Hv], dtype),
      logSumExp: Tensor.fromArray(acc.lse, [B, T, N], 'float32'),
    };
  },
};
