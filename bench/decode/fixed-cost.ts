/**
 * A decode call's fixed time, per cache layout: one cache of B × S tokens read to lengths L = 0 … S
 * (keyValueSeqLengths; the grid, the split count and the kernel form follow the cache's S, so every length runs
 * the same launches), 20 calls between each pair of CUDA events, median of 30. A least-squares line
 * t(L) = t0 + bytes(L) / rate through the lengths from S/16 gives the fixed µs a call carries and the marginal
 * rate; L = 0 times the launches over empty ranges (launch gap, prologue, merge and output, no tile read).
 * Why: between 1M and 4M cached tokens K=1 gains 4–10% at a marginal 4.5–4.7 TB/s, which puts ~11–20 µs of
 * fixed time on each 125–140 µs 1M-token call (bench/results/2026-12-02-s13-decode §2); this says where.
 *   node --import tsx bench/decode/fixed-cost.ts --out fixed.json [--shape 64:16384:1]
 *        [--layouts dense,paged16,paged64] [--impl flash] [--tuning '{"combine":"fused"}']
 */
import { writeFileSync } from 'node:fs';
import { attention } from '../../src/api/attention.js';
import { getCudaContext } from '../../src/backends/cuda/context.js';
import { type DecodeTuning, decodeTuning } from '../../src/backends/cuda/flash/decode-splits.js';
import type { AttentionOptions } from '../../src/backends/problem.js';
import { attnlabCommit, commandLine, describeMachine } from '../../src/bench/machine.js';
import { InvalidArgumentError } from '../../src/errors.js';
import { deviceRandom, medianMs, shuffledTable } from './device-timing.js';

const args = process.argv.slice(2);
const option = (name: string, fallback: string) => {
  const at = args.indexOf(name);
  return at >= 0 && at + 1 < args.length ? args[at + 1] : fallback;
};
const out = option('--out', 'decode-fixed-cost.json');
const [B, S, K] = option('--shape', '64:16384:1').split(':').map(Number);
if (![B, S, K].every((x) => Number.isInteger(x) && x > 0))
  throw new InvalidArgumentError('--shape', 'B:S:K, three positive integers', option('--shape', ''));
const layouts = option('--layouts', 'dense,paged16,paged64').split(',');
const implementation = option('--impl', 'flash') as AttentionOptions['implementation'];
const tuning = JSON.parse(option('--tuning', '{}')) as DecodeTuning;
Object.assign(decodeTuning, tuning);
const [N, H, REPEATS, BATCH] = [32, 128, 30, 20];
const LENGTHS = [0, S / 16, S / 8, S / 4, S / 2, S].map(Math.floor);

interface Row {
  layout: string;
  length: number;
  ms: number;
  bytes: number;
  variant: string;
}
const bytesAt = (length: number) => 2 * (2 * B * length * K * H + 2 * B * N * H);

/** Least squares of ms against bytes over the rows of lengths ≥ S/16: intercept µs and GB/s. */
function fit(rows: Row[]): { fixedUs: number; marginalGBs: number } {
  const xs = rows.filter((r) => r.length >= S / 16);
  const mx = xs.reduce((a, r) => a + r.bytes, 0) / xs.length;
  const my = xs.reduce((a, r) => a + r.ms, 0) / xs.length;
  const sxy = xs.reduce((a, r) => a + (r.bytes - mx) * (r.ms - my), 0);
  const sxx = xs.reduce((a, r) => a + (r.bytes - mx) ** 2, 0);
  const slope = sxy / sxx; // ms a byte
  return { fixedUs: (my - slope * mx) * 1000, marginalGBs: 1 / (slope * 1e-3) / 1e9 };
}

getCudaContext();
const q = deviceRandom([B, 1, N, H], 1);
const rows: Row[] = [];
const fits: Record<string, ReturnType<typeof fit> & { emptyUs: number }> = {};
for (const layout of layouts) {
  const blockSize = layout === 'dense' ? 0 : Number(layout.replace('paged', ''));
  if (layout !== 'dense' && !(blockSize > 0))
    throw new InvalidArgumentError('--layouts', 'dense, paged16, paged64 or pagedN', layout);
  const shape = blockSize ? [B * Math.ceil(S / blockSize), blockSize, K, H] : [B, S, K, H];
  const k = deviceRandom(shape, 2);
  const v = deviceRandom(shape, 3);
  const table = blockSize ? shuffledTable(B, S, blockSize) : null;
  const mine: Row[] = [];
  for (const length of LENGTHS) {
    const options: AttentionOptions = {
      implementation,
      keyValueSeqLengths: Array(B).fill(length),
      ...(table && { blockTable: table }),
    };
    let variant = '';
    const ms = medianMs(
      () => {
        const r = attention(q, k, v, options);
        variant = r.variant;
        return r.output;
      },
      REPEATS,
      300,
      BATCH,
    );
    const row = { layout, length, ms, bytes: bytesAt(length), variant };
    mine.push(row);
    console.log(
      `${layout.padEnd(8)} L=${String(length).padStart(6)} ${(ms * 1000).toFixed(1).padStart(8)} µs ` +
        `${(row.bytes / (ms * 1e-3) / 1e9).toFixed(0).padStart(5)} GB/s  ${variant}`,
    );
  }
  const line = fit(mine);
  fits[layout] = { ...line, emptyUs: mine[0].ms * 1000 };
  console.log(
    `${layout}: fixed ${line.fixedUs.toFixed(1)} µs a call, marginal ${line.marginalGBs.toFixed(0)} GB/s, ` +
      `empty ranges ${(mine[0].ms * 1000).toFixed(1)} µs`,
  );
  rows.push(...mine);
  k.dispose();
  v.dispose();
}
writeFileSync(
  out,
  `${JSON.stringify(
    {
      kind: 'decode-fixed-cost',
      command: commandLine(),
      commit: attnlabCommit(),
      machine: describeMachine(),
      shape: { B, S, K, N, H },
      callsPerEventPair: BATCH,
      decodeTuning: tuning,
      fits,
      rows,
    },
    null,
    2,
  )}\n`,
);
