/**
 * Which keys a query row may see, shared by the CPU backends so that both implement one rule.
 *
 * For query row i of batch b, with valid lengths Tb (querySeqLengths) and Sb (keyValueSeqLengths):
 * - i ≥ Tb: the row is padding and outputs zeros;
 * - keys j ≥ Sb are padding;
 * - the diagonal sits at j = i + d, with d = 0 for 'top_left' and d = Sb − Tb for 'bottom_right';
 * - isCausal keeps j ≤ i + d; a window [left, right] keeps i + d − left ≤ j ≤ i + d + right;
 * - a boolean mask then removes single pairs, and a −inf bias does too.
 */
import { BLOCK_EMPTY, BLOCK_FULL } from '../../variants/types.js';
import type { AttentionProblem } from '../problem.js';

/** Keys [lo, hi) that lengths, causality and the window allow for row i of batch b (empty when lo ≥ hi). */
export function keyRange(p: AttentionProblem, b: number, i: number): { lo: number; hi: number } {
  const queryLength = p.querySeqLengths ? p.querySeqLengths[b] : p.T;
  const keyLength = p.keyValueSeqLengths ? p.keyValueSeqLengths[b] : p.S;
  if (i >= queryLength) return { lo: 0, hi: 0 };
  const diagonal = i + (p.alignment === 'bottom_right' ? keyLength - queryLength : 0);
  let lo = 0;
  let hi = keyLength;
  if (p.causal) hi = Math.min(hi, diagonal + 1);
  if (p.window) {
    lo = Math.max(lo, diagonal - p.window.left);
    hi = Math.min(hi, diagonal + p.window.right + 1);
  }
  return { lo: Math.max(lo, 0), hi: Math.max(hi, 0) };
}

/** Decoded bias and mask with their broadcast strides, read per (b, n, i, j). */
export interface PairTerms {
  readonly bias: Float64Array | null;
  readonly biasStrides: readonly number[];
  readonly mask: Uint8Array | null;
  readonly maskStrides: readonly number[];
}

export function pairTerms(p: AttentionProblem): PairTerms {
  return {
    bias: p.bias ? p.bias.tensor.toFloat64Array() : null,
    biasStrides: p.bias ? p.bias.strides : [0, 0, 0, 0],
    mask: p.mask ? (p.mask.tensor.toHost().data as Uint8Array) : null,
    maskStrides: p.mask ? p.mask.strides : [0, 0, 0, 0],
  };
}

/** The mask modifier as the CPU flash backends read it: the block mask's empty and full blocks decide alone. */
export type PairKeep = (b: number, n: number, i: number, j: number) => boolean;

/**
 * maskMod of `p` (null without one), through its block mask when one is given: an empty block drops the
 * pair and a full one keeps it without evaluating maskMod, as the GPU kernels do; the reference evaluates
 * maskMod everywhere, so the two check each other.
 */
export function pairKeep(p: AttentionProblem): PairKeep | null {
  const keep = p.modifiers?.maskMod;
  if (!keep) return null;
  const m = p.blockMask;
  if (!m) return keep;
  const kinds = m.kinds.toHost().data as Uint8Array;
  const perHead = m.qBlocks * m.kvBlocks;
  const [strideB, strideH] = [m.Bm === 1 ? 0 : m.Nm * perHead, m.Nm === 1 ? 0 : perHead];
  const { blockQ, blockKV, kvBlocks } = m;
  return (b, n, i, j) => {
    const kind =
      kinds[b * strideB + n * strideH + Math.floor(i / blockQ) * kvBlocks + Math.floor(j / blockKV)];
    return kind === BLOCK_FULL ? true : kind === BLOCK_EMPTY ? false : keep(b, n, i, j);
  };
}

/**
 * Whether the block mask of `p` leaves the tile [i0, i1) × [j0, j1) of (b, n) empty (every block it overlaps
 * is empty), so CPU flash skips it as the GPU kernels do; always false without a block mask.
 */
export function tileEmpty(
  p: AttentionProblem,
): (b: number, n: number, i0: number, i1: number, j0: number, j1: number) => boolean {
  const m = p.blockMask;
  if (!m) return () => false;
  const kinds = m.kinds.toHost().data as Uint8Array;
  const perHead = m.qBlocks * m.kvBlocks;
  const [strideB, strideH] = [m.Bm === 1 ? 0 : m.Nm * perHead, m.Nm === 1 ? 0 : perHead];
  return (b, n, i0, i1, j0, j1) => {
    const base = b * strideB + n * strideH;
    for (let qb = Math.floor(i0 / m.blockQ); qb <= Math.floor((i1 - 1) / m.blockQ); qb++)
      for (let kb = Math.floor(j0 / m.blockKV); kb <= Math.floor((j1 - 1) / m.blockKV); kb++)
        if (kinds[base + qb * m.kvBlocks + kb] !== BLOCK_EMPTY) return false;
    return true;
  };
}
