/**
 * Paged and packed problems on the CPU, as the dense problem they mean: the paged pool gathered into
 * (B, S, K, H) through the block table, packed sequences spread into (B, T, N, H) padded with zeros
 * (their lengths mask the padding), and the dense output packed again. This is the oracle for the
 * GPU's paged and packed kernels: "a paged or packed call equals the dense call" holds here by
 * construction, so the CPU tests check the gather itself against hand-built dense inputs.
 */

import { allocHost } from '../../tensor/checks.js';
import type { RawArray } from '../../tensor/dtype.js';
import { Tensor } from '../../tensor/tensor.js';
import type { AttentionProblem, BackendOutput } from '../problem.js';

/** Runs `run` on the dense equivalent of `p` and returns its output in `p`'s layout. */
export function runDense(
  p: AttentionProblem,
  run: (dense: AttentionProblem) => BackendOutput,
): BackendOutput {
  if (!p.paged && !p.packed) return run(p);
  const dense = denseProblem(p);
  // The gathered and spread copies, and the dense output a packed query's is packed from, are this call's
  // own: freed here. Left to the GC net, a decode loop that disposed all it was given (KVCache's, as
  // docs/guide/kv-cache.md writes it) still grew memoryStats().hostBytes by them at every step.
  const made = [dense.query, dense.key, dense.value].filter((t, i) => t !== [p.query, p.key, p.value][i]);
  try {
    const result = run(dense);
    const queryOffsets = p.packed?.querySeqOffsets;
    if (!queryOffsets) return result;
    const totalT = queryOffsets[queryOffsets.length - 1];
    try {
      return {
        output: packRows(result.output, queryOffsets, [totalT, p.N, p.Hv]),
        logSumExp: result.logSumExp && packRows(result.logSumExp, queryOffsets, [totalT, p.N]),
        variant: result.variant,
      };
    } finally {
      result.output.dispose();
      result.logSumExp?.dispose();
    }
  } finally {
    for (const t of made) t.dispose();
  }
}

export function denseProblem(p: AttentionProblem): AttentionProblem {
  const { B, T, S, N, K, H, Hv } = p;
  const queryOffsets = p.packed?.querySeqOffsets ?? null;
  const kvOffsets = p.packed?.keyValueSeqOffsets ?? null;
  let key = p.key;
  let value = p.value;
  let keyLength = S;
  if (p.paged) {
    keyLength = gatheredLength(p);
    key = gatherPages(p.key, p, [B, keyLength, K, H]);
    value = gatherPages(p.value, p, [B, keyLength, K, Hv]);
  } else if (kvOffsets) {
    key = spreadRows(p.key, kvOffsets, [B, S, K, H]);
    value = spreadRows(p.value, kvOffsets, [B, S, K, Hv]);
  }
  const query = queryOffsets ? spreadRows(p.query, queryOffsets, [B, T, N, H]) : p.query;
  return { ...p, S: keyLength, query, key, value, paged: null, packed: null };
}

/**
 * The keys a paged problem's dense copy needs: its longest sequence's blocks, not the table's capacity.
 * Tables are often far wider than what they hold (vLLM sizes them for the longest context a model
 * takes): a table 65k blocks wide of 16-token blocks gathered whole asked 128 GiB of host memory at
 * B=8, K=8, H=128 for a few cached tokens. Keys past a sequence's length are padding to every CPU
 * backend (visibility.ts), and a bias or mask keeps the strides of its own (…, T, S) shape, so a
 * shorter dense S changes no result. At least one block, so that no copy is empty.
 */
function gatheredLength(p: AttentionProblem): number {
  const paged = p.paged;
  if (!paged) throw new Error('unreachable: a paged problem expected');
  const { maxBlocksPerSeq: M, blockSize } = paged;
  if (!p.keyValueSeqLengths) return M * blockSize;
  const longest = p.keyValueSeqLengths.reduce((a, l) => Math.max(a, l), 0);
  return Math.min(M, Math.max(1, Math.ceil(longest / blockSize))) * blockSize;
}

/** Pool (numBlocks, blockSize, …) → (B, maxBlocks·blockSize, …): sequence b's blocks in table order. */
function gatherPages(pool: Tensor, p: AttentionProblem, shape: readonly number[]): Tensor {
  const paged = p.paged;
  if (!paged) throw new Error('unreachable: a paged problem expected');
  const { blockTable, maxBlocksPerSeq: M, blockSize } = paged;
  const src = pool.toHost().data;
  const blockElements = src.length / paged.numBlocks;
  const width = shape[1] / blockSize; // blocks a sequence takes in the dense copy (gatheredLength)
  const dst = allocHost(pool.dtype, shape); // (B, width·blockSize, K, H): p.B·width·blockElements
  const lengths = p.keyValueSeqLengths;
  for (let b = 0; b < p.B; b++) {
    // Only the blocks the sequence holds are read: later table entries may be padding (0 or −1).
    const used = Math.ceil((lengths ? lengths[b] : M * blockSize) / blockSize);
    for (let m = 0; m < used; m++) {
      const block = blockTable[b * M + m];
      copyRange(dst, (b * width + m) * blockElements, src, block * blockElements, blockElements);
    }
  }
  return Tensor.fromRaw(dst, shape, pool.dtype);
}

/** Packed (total, …) → (B, maxLength, …) with zero padding. */
function spreadRows(packed: Tensor, offsets: Int32Array, shape: readonly number[]): Tensor {
  const src = packed.toHost().data;
  const rowElements = packed.shape.slice(1).reduce((a, d) => a * d, 1);
  const [B, L] = shape;
  const dst = allocHost(packed.dtype, shape);
  for (let b = 0; b < B; b++) {
    const rows = offsets[b + 1] - offsets[b];
    copyRange(dst, b * L * rowElements, src, offsets[b] * rowElements, rows * rowElements);
  }
  return Tensor.fromRaw(dst, shape, packed.dtype);
}

/** Dense (B, L, …) → packed (total, …): the rows each sequence holds. */
function packRows(dense: Tensor, offsets: Int32Array, shape: readonly number[]): Tensor {
  const src = dense.toHost().data;
  const [B, L] = dense.shape;
  const rowElements = dense.size / (B * L);
  const dst = allocHost(dense.dtype, shape);
  for (let b = 0; b < B; b++) {
    const rows = offsets[b + 1] - offsets[b];
    copyRange(dst, offsets[b] * rowElements, src, b * L * rowElements, rows * rowElements);
  }
  return Tensor.fromRaw(dst, shape, dense.dtype);
}

function copyRange(dst: RawArray, at: number, src: RawArray, from: number, count: number): void {
  (dst as Uint8Array).set((src as Uint8Array).subarray(from, from + count), at);
}
