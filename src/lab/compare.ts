/**
 * Comparisons the lab prints: max |a − b| and numpy's allclose over two tensors, and the slice of
 * one query position, with the codelab's semantics (jnp.allclose: |a − b| ≤ atol + rtol·|b|).
 */
import { InvalidArgumentError } from '../errors.js';
import type { Tensor } from '../tensor/tensor.js';

function sameShape(a: Tensor, b: Tensor): void {
  if (a.shape.join() !== b.shape.join()) {
    throw new InvalidArgumentError('b', `a tensor of shape ${shapeText(a.shape)}`, shapeText(b.shape));
  }
}

/** Largest |a − b| over all elements (NaN when either holds a NaN there). */
export function maxAbsDiff(a: Tensor, b: Tensor): number {
  sameShape(a, b);
  return maxAbsDiffValues(a.toFloat64Array(), b.toFloat64Array());
}

export function maxAbsDiffValues(x: Float64Array, y: Float64Array): number {
  let max = 0;
  for (let i = 0; i < x.length; i++) {
    const d = Math.abs(x[i] - y[i]);
    if (Number.isNaN(d)) return Number.NaN;
    if (d > max) max = d;
  }
  return max;
}

/** numpy.allclose(a, b, rtol, atol): every |a − b| ≤ atol + rtol·|b|, NaNs unequal. */
export function allClose(a: Tensor, b: Tensor, rtol: number, atol: number): boolean {
  sameShape(a, b);
  const x = a.toFloat64Array();
  const y = b.toFloat64Array();
  for (let i = 0; i < x.length; i++) {
    if (!(Math.abs(x[i] - y[i]) <= atol + rtol * Math.abs(y[i]))) return false;
  }
  return true;
}

/**
 * Max |a − b| over query position t only, of two (B,T,N,H) outputs: the codelab's
 * `causal_out[:, t] - nocausal_out[:, t]`.
 */
export function maxAbsDiffAtPosition(a: Tensor, b: Tensor, t: number): number {
  sameShape(a, b);
  const [B, T, N, H] = a.shape;
  if (!Number.isInteger(t) || t < 0 || t >= T)
    throw new InvalidArgumentError('t', `a position in [0, ${T})`, String(t));
  const x = a.toFloat64Array();
  const y = b.toFloat64Array();
  let max = 0;
  for (let batch = 0; batch < B; batch++) {
    const start = (batch * T + t) * N * H;
    max = Math.max(max, maxAbsDiffValues(x.subarray(start, start + N * H), y.subarray(start, start + N * H)));
  }
  return max;
}

/** A shape as the codelab prints it: (4, 128, 8, 64). */
export function shapeText(shape: readonly number[]): string {
  return `(${shape.join(', ')})`;
}

/** 1.23e-4 style, as the codelab's f"{x:.2e}". */
export function sci(value: number): string {
  return Number.isNaN(value) ? 'NaN' : value.toExponential(2);
}
