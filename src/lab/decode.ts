/**
 * 9b. The codelab's "KV-cache savings" made concrete: one decode step (one new query token per
 * sequence, causal bottom-right over a long cache) for K = 8, 2 and 1 KV heads at fixed N. A step
 * reads the whole cache once and does ~2 flops per byte, so where it is bandwidth-bound its time
 * follows the cache bytes, 2·B·S·K·H·itemsize: K=1 reads 8× fewer than K=8. Prefill (9a) does
 * ~T flops per byte and barely moves with K.
 */
import { attention } from '../api/attention.js';
import { cacheBytes } from '../bench/bandwidth.js';
import { measureAttnlabCase } from '../bench/measure.js';
import type { BenchCase } from '../bench/sweep.js';
import { formatBytes } from '../errors.js';
import { formatNumber } from '../report/terminal.js';
import type { ResultRow } from '../results/schema.js';
import type { LabContext } from './context.js';
import { printCharts } from './timing.js';

export const DECODE_KV_HEADS = [8, 2, 1] as const;

const PATTERN: Record<number, string> = { 8: 'MHA', 2: 'GQA', 1: 'MQA' };

/** Median ms of the ok row of `rows` with K heads, if any. */
function msAt(rows: readonly ResultRow[], K: number): number | undefined {
  return rows.find((r) => r.K === K && r.status === 'ok')?.timing?.ms.median;
}

/** 9b. Time per decode step and cache bytes by KV heads; `prefill` holds 9a's timed rows to compare. */
export async function decodeSection(lab: LabContext, prefill: readonly ResultRow[]): Promise<void> {
  lab.heading('9b. Decoding: what GQA and MQA save in the KV cache');
  const { B, S, N, H } = lab.sizes.decode;
  // The CUDA decode kernel takes bf16/f16; the CPU flash backend computes in float64 from f32 inputs.
  const dtype = lab.device === 'cuda' ? 'bfloat16' : 'float32';
  const rows: ResultRow[] = [];
  for (const K of DECODE_KV_HEADS) {
    // causal false in the row (its flops and the error check's oracle): the one new token sits at
    // the end of the cache, so bottom-right causality masks nothing and the problem is unmasked.
    const c: BenchCase = { B, T: 1, S, N, K, H, dtype, causal: false, impl: 'flash' };
    rows.push(
      measureAttnlabCase(c, {
        ...lab.measure('decode'),
        label: `attnlab flash ${dtype === 'bfloat16' ? 'bf16' : 'f32'} decode step`,
        call: (q, k, v) =>
          attention(q, k, v, { implementation: 'flash', isCausal: true, causalAlignment: 'bottom_right' }),
      }),
    );
  }
  lab.timed(`Decode step by KV heads — B=${B}, S=${S} cached tokens, N=${N}, H=${H}, ${dtype}`, rows);

  const base = rows.find((r) => r.K === 8);
  const table = rows.map((r) => {
    const ms = r.timing?.ms.median;
    const bytes = cacheBytes({ ...r, dtype });
    const gbs = r.bandwidthGBs;
    const baseMs = base?.timing?.ms.median;
    return [
      `${PATTERN[r.K]} (K=${r.K})`,
      formatBytes(bytes),
      `${(cacheBytes({ ...r, K: 8, dtype }) / bytes).toFixed(0)}×`,
      ms ? ms.toFixed(4) : `${r.status}: ${r.reason ?? ''}`.slice(0, 60),
      ms && baseMs ? `${(baseMs / ms).toFixed(2)}×` : '—',
      gbs ? formatNumber(gbs) : '—',
    ];
  });
  lab.table(
    'KV-cache bytes and decode-step time',
    ['Pattern', 'Cache bytes', 'K=8 bytes / these', 'ms per step', 'Speed-up vs K=8', 'GB/s read'],
    table,
    'Cache bytes = 2 (K and V) × B × S × K × H × bytes per value; GB/s counts the cache read once ' +
      'plus Q and O, over the median step time.',
  );
  printCharts(lab, rows);

  const [d8, d1] = [msAt(rows, 8), msAt(rows, 1)];
  const [p8, p1] = [
    msAt(
      prefill.filter((r) => r.impl === 'flash'),
      8,
    ),
    msAt(
      prefill.filter((r) => r.impl === 'flash'),
      1,
    ),
  ];
  if (d8 && d1) {
    const prefillText =
      p8 && p1
        ? ` In prefill (9a, T=${prefill[0].T}) the same change took the flash call from ${p8.toFixed(3)} ` +
          `to ${p1.toFixed(3)} ms (${(p8 / p1).toFixed(2)}×): there the arithmetic, not the cache, sets the time.`
        : '';
    lab.explain(
      `K=1 keeps ${formatBytes(cacheBytes({ B, S, K: 1, H, dtype }))} of cache where K=8 keeps ` +
        `${formatBytes(cacheBytes({ B, S, K: 8, H, dtype }))} (8× fewer bytes to read per step); the ` +
        `decode step took ${d1.toFixed(4)} ms instead of ${d8.toFixed(4)} ms (${(d8 / d1).toFixed(2)}× ` +
        'faster). A bandwidth-bound step gets close to 8×; on the CPU, or when a small cache stays in ' +
        `L2, the step is bound by arithmetic or overheads and gains less.${prefillText}`,
    );
  }
}
