/**
 * A dense cache's key and value as pools of `blockSize`-token blocks behind a shuffled block table: what
 * `attnlab bench --block-size` times. Shuffled (a seeded permutation of the pool), as decode-bench's tables are by
 * default and a serving system's pool is after sequences come and go: scattered pages are what a paged kernel pays
 * for (at K=1 the library reads pages in pool order 1–3% faster; docs/benchmarks.md). The pages
 * hold the dense cache's rows, so the paged call equals the dense one and the float64 oracle of the dense inputs
 * checks it.
 */
import { allocHost } from '../tensor/checks.js';
import { Random } from '../tensor/random.js';
import { Tensor } from '../tensor/tensor.js';

export interface PagedInputs {
  readonly keyPool: Tensor;
  readonly valuePool: Tensor;
  /** (B, ⌈S / blockSize⌉) int32 pool block indices. */
  readonly blockTable: Tensor;
  /** S for every sequence: the whole dense cache. */
  readonly lengths: number[];
}

/** key (B, S, K, H) and value (B, S, K, Hv), host tensors, as pools of `blockSize` tokens (zero past S). */
export function pagedFromDense(key: Tensor, value: Tensor, blockSize: number, seed: number): PagedInputs {
  const [B, S] = key.shape;
  const M = Math.ceil(S / blockSize);
  const numBlocks = B * M;
  // Fisher–Yates over the pool's blocks: sequence b's block m is pool block order[b·M + m].
  const order = Int32Array.from({ length: numBlocks }, (_, i) => i);
  const random = new Random(seed);
  for (let i = numBlocks - 1; i > 0; i--) {
    const j = Math.floor(random.nextFloat() * (i + 1));
    [order[i], order[j]] = [order[j], order[i]];
  }
  const pool = (dense: Tensor): Tensor => {
    const [, , K, X] = dense.shape;
    const row = K * X;
    const shape = [numBlocks, blockSize, K, X];
    const src = dense.data as Uint8Array;
    const dst = allocHost(dense.dtype, shape) as Uint8Array;
    for (let b = 0; b < B; b++)
      for (let m = 0; m < M; m++) {
        const tokens = Math.min(blockSize, S - m * blockSize);
        const from = (b * S + m * blockSize) * row;
        dst.set(src.subarray(from, from + tokens * row), order[b * M + m] * blockSize * row);
      }
    return Tensor.fromRaw(dst, shape, dense.dtype);
  };
  return {
    keyPool: pool(key),
    valuePool: pool(value),
    blockTable: Tensor.fromRaw(order, [B, M], 'int32'),
    lengths: Array.from({ length: B }, () => S),
  };
}
