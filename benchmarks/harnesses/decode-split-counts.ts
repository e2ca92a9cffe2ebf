/**
 * The measurement behind decode-splits.ts: attnlab's flash decode kernel over a grid of (B, S) at
 * K=8, N=32, H=128, bf16, one query token, for each forced split count and loader (cp.async; bulk)
 * on a dense and a paged (block size 16) cache; rows as decode-bench.ts's, plus splits/loader and
 * the count the model chose (splits 0). Shorter settle and fewer repeats than decode-bench (30 ms,
 * median of 8): it ranks split counts, it is not the headline number.
 *
 *   node --import tsx benchmarks/harnesses/decode-split-counts.ts --out splits.json [--shapes 64x16384,8x131072]
 *        [--splits 1,2,4] [--loaders bulk,async] [--layouts dense,paged16] [--K 8] [--once]
 */
import { writeFileSync } from 'node:fs';
import { attention } from '../../src/api/attention.js';
import { decodeTuning } from '../../src/backends/cuda/flash/decode/decode-splits.js';
import { getCudaContext } from '../../src/backends/cuda/runtime/context.js';
import type { AttentionOptions } from '../../src/backends/problem.js';
import { attnlabCommit, commandLine, describeMachine } from '../../src/bench/machine.js';
import { HBM_PEAK_GBS } from '../../src/results/schema.js';
import { type DecodeRow, deviceRandom, medianMs, pageTable } from './decode-timing.js';

const args = process.argv.slice(2);
const option = (name: string, fallback: string) =>
  args.includes(name) ? args[args.indexOf(name) + 1] : fallback;
const list = (name: string, fallback: string) => option(name, fallback).split(',');
const out = option('--out', 'splits.json');
const K = Number(option('--K', '8'));
const [N, H] = [32, 128];
const shapes = list(
  '--shapes',
  '1x2048,1x8192,1x32768,1x131072,4x32768,16x8192,8x131072,64x16384,128x8192',
).map((s) => s.split('x').map(Number) as [number, number]);
const splitCounts = list('--splits', '0,1,2,3,4,5,6,8,12,16,24,32,64').map(Number);
// The bulk loader only when asked: it stalled on its first run (decode.ts).
const loaders = list('--loaders', 'async') as Array<'bulk' | 'async'>;
const layouts = list('--layouts', 'dense,paged16');
// The GPU is kept busy from one timing to the next, so a short settle suffices to rank counts.
// --once: each configuration runs once, untimed (for ncu's --launch-count: one launch each).
const once = args.includes('--once');
const [REPEATS, SETTLE_MS] = [8, 30];

interface SweepRow extends DecodeRow {
  loader: string;
  splits: number;
  bandwidthGBs: number;
}
const rows: SweepRow[] = [];
getCudaContext();
shapes.forEach(([B, S], index) => {
  const bytes = 2 * (2 * B * S * K * H + 2 * B * N * H);
  const q = deviceRandom([B, 1, N, H], 10 * index + 1);
  for (const layout of layouts) {
    const blockSize = layout === 'dense' ? 0 : Number(layout.replace('paged', ''));
    const table = blockSize ? pageTable(B, S, blockSize) : null;
    const rowsOfCache = table ? [table.shape[0] * table.shape[1], blockSize] : [B, S];
    const k = deviceRandom([...rowsOfCache, K, H], 10 * index + 2);
    const v = deviceRandom([...rowsOfCache, K, H], 10 * index + 3);
    const options: AttentionOptions = table
      ? { implementation: 'flash', blockTable: table, keyValueSeqLengths: Array.from({ length: B }, () => S) }
      : { implementation: 'flash' };
    for (const loader of loaders)
      for (const splits of splitCounts) {
        if (splits > Math.ceil(S / 64)) continue;
        decodeTuning.loader = loader;
        decodeTuning.splits = splits || undefined; // 0: the model's choice
        let variant = '';
        const call = () => {
          const r = attention(q, k, v, options);
          variant = r.variant;
          return r.output;
        };
        if (once) {
          call().dispose();
          continue;
        }
        const ms = medianMs(call, REPEATS, SETTLE_MS);
        const GBs = bytes / (ms * 1e-3) / 1e9;
        const chosen = Number(/split(\d+)/.exec(variant)?.[1] ?? 0);
        rows.push({
          label: splits ? 'attnlab flash forced splits' : 'attnlab flash chosen splits',
          B,
          S,
          N,
          K,
          H,
          layout,
          loader,
          splits: chosen,
          variant,
          ms,
          bandwidthGBs: GBs,
          bandwidthPercent: (100 * GBs) / HBM_PEAK_GBS,
        });
      }
    k.dispose();
    v.dispose();
  }
  q.dispose();
});
delete decodeTuning.loader;
delete decodeTuning.splits;

writeFileSync(
  out,
  `${JSON.stringify({ kind: 'decode-splits-sweep', command: commandLine(), commit: attnlabCommit(), machine: describeMachine(), peakGBs: HBM_PEAK_GBS, rows }, null, 2)}\n`,
);
// Per shape, layout and loader: the best forced count and the model's, with their bandwidth.
console.log('B      S        layout   loader  best splits (GB/s)   chosen splits (GB/s)');
for (const [B, S] of shapes)
  for (const layout of layouts)
    for (const loader of loaders) {
      const mine = rows.filter((r) => r.B === B && r.S === S && r.layout === layout && r.loader === loader);
      const forced = mine.filter((r) => r.label.includes('forced'));
      const chosen = mine.find((r) => r.label.includes('chosen'));
      if (!forced.length) continue;
      const best = forced.reduce((a, r) => (r.bandwidthGBs > a.bandwidthGBs ? r : a));
      console.log(
        `${String(B).padEnd(7)}${String(S).padEnd(9)}${layout.padEnd(9)}${loader.padEnd(8)}` +
          `${best.splits} (${best.bandwidthGBs.toFixed(0)})`.padEnd(21) +
          (chosen ? `${chosen.splits} (${chosen.bandwidthGBs.toFixed(0)})` : '-'),
      );
    }
