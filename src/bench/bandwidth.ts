/**
 * A decode step reads its K/V cache once and does ~2 flops a byte: its rows are judged by bytes moved
 * over time (issue 16's GB/s), not TFLOP/s. One rule for every row that times one: attnlab's (measure.ts,
 * the lab's decode section) and the peers' (peers.ts), so the two sides of a comparison count the same
 * bytes.
 */
import { HBM_PEAK_GBS, type ResultRow } from '../results/schema.js';
import { isDType, itemSize } from '../tensor/dtype.js';

type Sizes = Pick<ResultRow, 'B' | 'T' | 'S' | 'N' | 'K' | 'H'> & { dtype: string };

const bytesPerElement = (dtype: string): number | undefined => (isDType(dtype) ? itemSize(dtype) : undefined);

/** Bytes of the K and V cache of B sequences of S tokens: 2 (K and V) · B · S · K · H · itemsize. */
export function cacheBytes(c: Omit<Sizes, 'T' | 'N'>): number {
  return 2 * c.B * c.S * c.K * c.H * (bytesPerElement(c.dtype) ?? Number.NaN);
}

/** Bytes a decode step moves at the least: the cache read once, plus Q read and O written. */
export function decodeStepBytes(c: Sizes): number {
  return cacheBytes(c) + 2 * c.B * c.T * c.N * c.H * (bytesPerElement(c.dtype) ?? Number.NaN);
}

/**
 * `row` with bandwidthGBs where it times a forward decode step (T = 1, not causal, status ok, a median time, a
 * dtype of known size), and bandwidthPercent of HBM_PEAK_GBS where it ran on a GPU; any other row as it came.
 * Not causal: a decode step's one new token is the cache's last (bottom-right, nothing masked; the lab's rows say
 * causal false), where a causal row of the bench is top-left and its one query sees one key, not the cache.
 */
export function withDecodeBandwidth(row: ResultRow, onGpu: boolean): ResultRow {
  const ms = row.timing?.ms.median;
  const forward = (row.pass ?? 'forward') === 'forward';
  if (
    row.T !== 1 ||
    row.causal ||
    !forward ||
    row.status !== 'ok' ||
    !ms ||
    bytesPerElement(row.dtype) === undefined
  )
    return row;
  const bandwidthGBs = decodeStepBytes(row) / (ms * 1e-3) / 1e9;
  return {
    ...row,
    bandwidthGBs,
    ...(onGpu ? { bandwidthPercent: (100 * bandwidthGBs) / HBM_PEAK_GBS } : {}),
  };
}
