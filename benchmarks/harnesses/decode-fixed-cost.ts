/**
 * A decode call's fixed time, per cache layout: one cache of B × S tokens read to lengths L = 0 … S
 * (keyValueSeqLengths; the split count and the kernel form follow the cache's S, and the kernel the full
 * length runs is forced at every length, as the rule picks by the lengths' sum: every length runs the same
 * launches, and each row's variant says so), 20 calls between each pair of CUDA events, median of 30, per call
 * and with the host hidden (src/bench/hidden-host.ts: the kernels alone). A least-squares line
 * t(L) = t0 + bytes(L) / rate through the kernels-alone times of the lengths from S/16 gives the fixed µs a call's
 * kernels carry and the marginal rate; L = 0 times the launches over empty ranges (launch gap, prologue, merge
 * and output, no tile read). The kernels-alone times, not the per-call ones: below ~8k keys a call's host time
 * (31–69 µs a call) decides those, and a line through them says nothing.
 * Why: between 1M and 4M cached tokens K=1 gains 4–10% at a marginal 4.5–4.7 TB/s, which puts ~11–20 µs of
 * fixed time on each 125–140 µs 1M-token call (benchmarks/results/h200/decode/2026-12-02-cache-length-row-groups §2); this says where.
 *   node --import tsx benchmarks/harnesses/decode-fixed-cost.ts --out fixed.json [--shape 64:16384:1]
 *        [--layouts dense,paged16,paged64] [--impl flash] [--tuning '{"combine":"fused"}']
 */
import { writeFileSync } from 'node:fs';
import { attention } from '../../src/api/attention.js';
import {
  applyDecodeTuning,
  type DecodeTuning,
  decodeTuning,
} from '../../src/backends/cuda/flash/decode/decode-splits.js';
import { getCudaContext } from '../../src/backends/cuda/runtime/context.js';
import type { AttentionOptions } from '../../src/backends/problem.js';
import { timeHostHidden } from '../../src/bench/hidden-host.js';
import { attnlabCommit, commandLine, describeMachine } from '../../src/bench/machine.js';
import { InvalidArgumentError } from '../../src/errors.js';
import { deviceRandom, medianMs, pageTable } from './decode-timing.js';

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
applyDecodeTuning(tuning, '--tuning');
const [N, H, REPEATS, BATCH] = [32, 128, 30, 20];
const LENGTHS = [0, S / 16, S / 8, S / 4, S / 2, S].map(Math.floor);

interface Row {
  layout: string;
  length: number;
  /** Per call, 20 back to back between events. */
  ms: number;
  /** The same calls with the host hidden: the kernels alone (null where that could not be timed: `kernelsReason`). */
  kernelsMs: number | null;
  kernelsReason?: string;
  bytes: number;
  variant: string;
}
const bytesAt = (length: number) => 2 * (2 * B * length * K * H + 2 * B * N * H);

/**
 * Least squares of ms against bytes over the rows of lengths ≥ S/16 (the kernels' times, or the calls' where a
 * row has none): intercept µs and GB/s.
 */
function fit(rows: Row[]): { fixedUs: number; marginalGBs: number; fittedOn: 'kernels' | 'calls' } {
  const xs = rows.filter((r) => r.length >= S / 16);
  const fittedOn = xs.every((r) => r.kernelsMs !== null) ? 'kernels' : 'calls';
  const t = (r: Row) => (fittedOn === 'kernels' ? (r.kernelsMs as number) : r.ms);
  const mx = xs.reduce((a, r) => a + r.bytes, 0) / xs.length;
  const my = xs.reduce((a, r) => a + t(r), 0) / xs.length;
  const sxy = xs.reduce((a, r) => a + (r.bytes - mx) * (t(r) - my), 0);
  const sxx = xs.reduce((a, r) => a + (r.bytes - mx) ** 2, 0);
  const slope = sxy / sxx; // ms a byte
  return { fixedUs: (my - slope * mx) * 1000, marginalGBs: 1 / (slope * 1e-3) / 1e9, fittedOn };
}

/** The decodeTuning.kernel that runs what `variant` names (decode.ts's variant keys). */
function kernelOf(variant: string): NonNullable<DecodeTuning['kernel']> {
  if (variant.startsWith('flash-decode-tma.')) return 'tma';
  if (variant.startsWith('flash-decode-heads.')) return 'heads';
  if (variant.startsWith('flash-decode.')) return 'rows';
  throw new InvalidArgumentError('--impl', 'a backend that runs the flash decode kernels', variant);
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
  const table = blockSize ? pageTable(B, S, blockSize) : null;
  const mine: Row[] = [];
  const optionsAt = (length: number): AttentionOptions => ({
    implementation,
    keyValueSeqLengths: Array(B).fill(length),
    ...(table && { blockTable: table }),
  });
  // The kernel of the full length, forced at every length unless --tuning names one.
  const full = attention(q, k, v, optionsAt(S));
  full.output.dispose();
  const forcedKernel = tuning.kernel === undefined;
  if (forcedKernel) decodeTuning.kernel = kernelOf(full.variant);
  for (const length of LENGTHS) {
    const options = optionsAt(length);
    let variant = '';
    const call = () => {
      const r = attention(q, k, v, options);
      variant = r.variant;
      return r.output;
    };
    const ms = medianMs(call, REPEATS, 300, BATCH);
    const row: Row = { layout, length, ms, kernelsMs: null, bytes: bytesAt(length), variant };
    try {
      row.kernelsMs = timeHostHidden(call, { samples: REPEATS, batch: BATCH }).deviceMs;
    } catch (error) {
      row.kernelsReason = (error as Error).message;
    }
    mine.push(row);
    const gbs = (t: number) => (row.bytes / (t * 1e-3) / 1e9).toFixed(0).padStart(5);
    const kernels =
      row.kernelsMs === null ? '-' : `${(row.kernelsMs * 1000).toFixed(1)} µs ${gbs(row.kernelsMs)} GB/s`;
    console.log(
      `${layout.padEnd(8)} L=${String(length).padStart(6)} ${(ms * 1000).toFixed(1).padStart(8)} µs ${gbs(ms)} GB/s, ` +
        `kernels ${kernels.padStart(19)}  ${variant}` +
        `${variant === full.variant ? '' : `  (the full length ran ${full.variant})`}`,
    );
  }
  if (forcedKernel) delete decodeTuning.kernel;
  const line = fit(mine);
  const empty = mine[0].kernelsMs ?? mine[0].ms;
  fits[layout] = { ...line, emptyUs: empty * 1000 };
  console.log(
    `${layout}: fixed ${line.fixedUs.toFixed(1)} µs a call (${line.fittedOn}), marginal ${line.marginalGBs.toFixed(0)} ` +
      `GB/s, empty ranges ${(empty * 1000).toFixed(1)} µs (${(mine[0].ms * 1000).toFixed(1)} a call)`,
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
