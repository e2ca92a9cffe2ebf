/**
 * Block tables for paged-cache benchmarks: which pool block holds each sequence's pages, in the orders a
 * serving system's pool takes (scattered after many appends and frees, in order, or interleaved as KVCache
 * hands blocks out), optionally with spare columns. The decode harnesses time attention() behind them.
 */
import { InvalidArgumentError } from '../errors.js';
import { Tensor } from '../tensor/tensor.js';

/**
 * How a benchmark's block table orders the pool: pages scattered (after many appends and frees), in order, or
 * interleaved as KVCache's free list hands blocks to B sequences that grow a token at a time from an empty pool.
 */
export type TableOrder = 'shuffled' | 'sequential' | 'interleaved';
export const TABLE_ORDERS: readonly TableOrder[] = ['shuffled', 'sequential', 'interleaved'];

/**
 * (B, ceil(S / blockSize) + spare) pool blocks, a sequence's pages scattered as after many appends and
 * frees (`order` 'shuffled', the default) or each sequence's pages one after another in the pool
 * ('sequential', a freshly allocated pool: what the layout costs against a dense cache, page order aside), or
 * sequence b's page j at pool block j·B + b ('interleaved': KVCache's free list in a decode loop of B sequences
 * growing a token at a time, src/api/kv-cache.ts; the pages a step's blocks read at once lie side by side);
 * `spare` unused entries (0) end each row: a serving system's fixed-width table with room for the next
 * blocks (the case where `auto` may pick cuDNN, decode-dispatch-table.ts). The pool holds
 * B · ceil(S / blockSize) blocks either way.
 */
export function pageTable(
  B: number,
  S: number,
  blockSize: number,
  spare = 0,
  order: TableOrder = 'shuffled',
): Tensor {
  if (!TABLE_ORDERS.includes(order))
    throw new InvalidArgumentError(
      'table order',
      TABLE_ORDERS.map((o) => `'${o}'`).join(', '),
      String(order),
    );
  const blocksPerSeq = Math.ceil(S / blockSize);
  const numBlocks = B * blocksPerSeq;
  const pages = Int32Array.from({ length: numBlocks }, (_, i) =>
    order === 'interleaved' ? (i % blocksPerSeq) * B + Math.floor(i / blocksPerSeq) : i,
  );
  for (let i = numBlocks - 1; order === 'shuffled' && i > 0; i--) {
    const j = (i * 2654435761) % (i + 1);
    [pages[i], pages[j]] = [pages[j], pages[i]];
  }
  if (spare === 0) return Tensor.fromRaw(pages, [B, blocksPerSeq], 'int32');
  const width = blocksPerSeq + spare;
  const table = new Int32Array(B * width);
  for (let b = 0; b < B; b++) table.set(pages.subarray(b * blocksPerSeq, (b + 1) * blocksPerSeq), b * width);
  return Tensor.fromRaw(table, [B, width], 'int32');
}
