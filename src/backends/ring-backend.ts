/**
 * The contract between context-parallel attention (api/context-parallel.ts, api/ring-run.ts) and the
 * devices it runs on: how shards move between ranks (RingTransport) and how a rank slices its shards
 * and merges block results (RingOps). The host versions live in api/ring-ops.ts and
 * api/ring-group.ts, the CUDA ones in backends/cuda/ring/.
 */
import type { DType } from '../tensor/dtype.js';
import type { Tensor } from '../tensor/tensor.js';

/** Rows of a rank's shard: [start, start + length). */
export interface RowRange {
  readonly start: number;
  readonly length: number;
}

/** Rows of one tensor, a piece of what RingOps.gather concatenates. */
export interface RowPiece {
  readonly tensor: Tensor;
  readonly rows: RowRange;
}

/** How shards move between ranks: NCCL between GPUs, or copies between virtual ranks of one device. */
export interface RingTransport {
  readonly size: number;
  /** Runs `fn` with rank's device current (a no-op for virtual ranks). */
  onRank<R>(rank: number, fn: () => R): R;
  /** A tensor shaped and typed like `t` on rank's device, contents undefined. */
  like(rank: number, t: Tensor): Tensor;
  /**
   * Enqueues recv[r][i] ← send[(r − 1 + P) % P][i] for every rank r, ordered after everything already
   * enqueued on each rank's compute stream and running beside what is enqueued there next.
   */
  shift(send: readonly (readonly Tensor[])[], recv: readonly (readonly Tensor[])[]): void;
  /** Makes every rank's compute stream wait for the last shift. */
  wait(): void;
  /** Throws InvalidArgumentError (naming `argument`) when `t` is not where rank's shards must be. */
  checkShard?(argument: string, rank: number, t: Tensor): void;
}

/** What a group builds per call: the transport for shards on `device`, and its teardown. */
export interface RingTransportFactory {
  transport(device: 'cpu' | 'cuda'): RingTransport;
  destroy(): void;
}

/** Sizes of one rank's output: (B, T, N, Hv) with T the shard's rows. */
export interface ShardShape {
  readonly B: number;
  readonly T: number;
  readonly N: number;
  readonly Hv: number;
}

/** The running (output, log-sum-exp) of one rank, merged block by block. */
export interface Accumulator {
  readonly shape: ShardShape;
}

export interface RingOps {
  /**
   * A new (nb, Σ rows, heads, dim) tensor: batches [b0, b0 + nb) of the pieces' rows (dim 1 of
   * (B, T, heads, dim) tensors), concatenated in order.
   */
  gather(pieces: readonly RowPiece[], b0: number, nb: number): Tensor;
  accumulator(shape: ShardShape): Accumulator;
  /**
   * Merges a block's output (nb, rows, N, Hv) and log-sum-exp (nb, rows, N) into batches [b0, b0+nb),
   * rows [rowStart, rowStart + rows) of `acc`: o ← (o·e^(l−m) + o'·e^(l'−m)) / (e^(l−m) + e^(l'−m)),
   * l ← m + log(e^(l−m) + e^(l'−m)), m = max(l, l'); a block with l' = −∞ adds nothing, a NaN l or l'
   * makes the row NaN.
   */
  merge(acc: Accumulator, b0: number, output: Tensor, logSumExp: Tensor, rowStart: number): void;
  /** The output in `dtype` and the log-sum-exp (B, T, N) float32; rows no block reached are 0 and −∞. */
  finish(acc: Accumulator, dtype: DType): { output: Tensor; logSumExp: Tensor };
}
