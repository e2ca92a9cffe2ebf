/**
 * Building paged and packed inputs from dense ones, element by element (the obvious way, so tests
 * do not share the backends' own gather): used by the CPU layout tests and the GPU decode suite.
 */
import type { ProblemSize } from '../../src/backends/problem.js';
import { Random } from '../../src/tensor/random.js';
import { Tensor } from '../../src/tensor/tensor.js';

/** (B, T, S, N, K, H) as a ProblemSize, so that a table of cases reads one line per case. */
export const sizes = (B: number, T: number, S: number, N: number, K: number, H: number): ProblemSize => ({
  B,
  T,
  S,
  N,
  K,
  H,
});

/** A random permutation of [0, n). */
function permutation(n: number, seed: number): number[] {
  const rng = new Random(seed);
  const order = Array.from({ length: n }, (_, i) => i);
  for (let i = n - 1; i > 0; i--) {
    const j = Math.floor(rng.nextFloat() * (i + 1));
    [order[i], order[j]] = [order[j], order[i]];
  }
  return order;
}

/**
 * A dense cache (B, S, K, X) and the same tokens scattered into a pool through a shuffled block
 * table, one element at a time (the obvious way, so the test does not share the backend's gather).
 * Pool slots no token lands in hold `unused` (NaN by default, so a read past a length shows).
 */
export function pagedCopy(dense: Tensor, blockSize: number, seed: number, unused = Number.NaN) {
  const [B, S, K, X] = dense.shape;
  const M = Math.ceil(S / blockSize);
  const numBlocks = B * M + 3; // spare blocks the table never names
  const order = permutation(numBlocks, seed);
  const table = Array.from({ length: B }, (_, b) => Array.from({ length: M }, (_, m) => order[b * M + m]));
  const values = dense.toFloat64Array();
  const pool = new Float64Array(numBlocks * blockSize * K * X).fill(unused);
  for (let b = 0; b < B; b++)
    for (let s = 0; s < S; s++)
      for (let e = 0; e < K * X; e++) {
        const slot = (table[b][Math.floor(s / blockSize)] * blockSize + (s % blockSize)) * K * X + e;
        pool[slot] = values[(b * S + s) * K * X + e];
      }
  return { pool: Tensor.fromArray(pool, [numBlocks, blockSize, K, X], dense.dtype), table, M };
}

/** Packs the first lengths[b] rows of each batch of a dense (B, L, …) tensor. */
export function pack(dense: Tensor, lengths: number[]) {
  const [B, L, ...rest] = dense.shape;
  const row = rest.reduce((a, d) => a * d, 1);
  const values = dense.toFloat64Array();
  const out: number[] = [];
  const offsets = [0];
  for (let b = 0; b < B; b++) {
    out.push(...values.subarray(b * L * row, (b * L + lengths[b]) * row));
    offsets.push(offsets[b] + lengths[b]);
  }
  return { tensor: Tensor.fromArray(out, [offsets[B], ...rest], dense.dtype), offsets };
}

/** Rows [t0, t0+n) of a host (B, L, …) tensor of 16-bit elements, as a new (B, n, …) tensor. */
export function sliceRows(t: Tensor, t0: number, n: number): Tensor {
  const [B, L, ...rest] = t.shape;
  const row = rest.reduce((a, d) => a * d, 1);
  const data = t.data as Uint16Array;
  const out = new Uint16Array(B * n * row);
  for (let b = 0; b < B; b++) out.set(data.subarray((b * L + t0) * row, (b * L + t0 + n) * row), b * n * row);
  return Tensor.fromRaw(out, [B, n, ...rest], t.dtype);
}

/** Packed (total, …) rows back into a dense (B, L, …) host array, `fill` where a sequence has no row. */
export function unpack(packed: Tensor, offsets: ArrayLike<number>, L: number, fill = 0): Float64Array {
  const rows = packed.toHost().toFloat64Array();
  const width = packed.shape.slice(1).reduce((a, d) => a * d, 1);
  const B = offsets.length - 1;
  const out = new Float64Array(B * L * width).fill(fill);
  for (let b = 0; b < B; b++)
    out.set(rows.subarray(offsets[b] * width, offsets[b + 1] * width), b * L * width);
  return out;
}
