/**
 * Decoding is reading the K/V cache: bytes moved (the cache rows each sequence holds, read once, plus
 * Q and O) over device time, as GB/s and as a percentage of the H200's 4.8 TB/s HBM peak, for
 * attnlab's flash decode kernel on a dense cache and on paged caches (block sizes 16 and 64), beside
 * PyTorch's SDPA backends on the same dense shapes in the same run (benchmarks/harnesses/decode_torch_peer.py).
 * One query token per sequence, N=32, H=128, bf16. CUDA events, 300 ms settle, median of 30 samples,
 * each `--batch` calls back to back between one event pair (default 20; 1: an event pair a call, as
 * the first benchmarks timed), on both sides.
 *
 *   node --import tsx benchmarks/harnesses/decode-bandwidth.ts --out decode.json [--torch python3|none] [--quick]
 *        [--impl flash,cudnn,auto] [--shapes 64:16384:8,1:2048:8] [--layouts dense,paged16,paged64]
 *        [--table-room] [--no-uncached] [--batch 20] [--tuning '{"kernel":"tma","rowGroups":2}'] [--empty-pool]
 *        [--table-order shuffled|sequential|interleaved]
 *
 * --impl names the attnlab backends timed (default flash); cudnn runs the dense cache through its
 * fused graph and the paged ones through cuDNN's paged attention (PAGED_CACHE_LOAD; with
 * ATTNLAB_CUDNN_GRAPH=unified, the unified SDPA_FWD op's paged attributes); auto leaves
 * `implementation` unset (the row's variant says which backend ran). A backend that refuses
 * a case gives a row with its reason. --shapes B:S:K lists replace the default shapes, --layouts
 * the three layouts. --table-room gives each block table one unused column (a serving system's
 * fixed-width table; the only tables `auto` may run on cuDNN), else the table is tight. Each paged
 * shape at B=1 is also timed with the device copies of its table and lengths dropped before every
 * call ("uncached": what every call paid before int32-cache.ts), unless --no-uncached.
 * Each row also times its calls with the host taken out (src/bench/hidden-host.ts: the batch enqueued
 * behind a GPU spin; PyTorch's behind torch.cuda._sleep): `kernelsGBs` is what the kernels read,
 * `hostUsPerCall` the host's enqueue time a call; --no-kernels-alone skips it. At B=1 the host decides a
 * call's time on both sides, and these columns say by how much.
 * --tuning sets the flash backend's decodeTuning (decode-splits.ts: kernel, rowGroups, splits, loader,
 * combine, …: applyDecodeTuning checks the keys and values) for every attnlab call of the run, to measure a choice
 * the rule does not make; the header records it.
 * --empty-pool returns the memory pool's free blocks to the driver after each shape (emptyCache), so each
 * shape's tensors are allocated afresh: flash's K=4 rows were seen to read 2–3% less after K=8 shapes in the
 * same process than first in one (benchmarks/results/h200/decode/2026-12-02-cache-length-row-groups §1), and this tells whether the pool's
 * state is why.
 * --table-order sequential gives each sequence its pages in pool order (a fresh pool) instead of scattered
 * (shuffled, the default): at K=1 a page of 16 rows is 4 KiB of K, and this tells what scattering such pages
 * costs apart from the layout itself; --table-order interleaved lays the pages out as KVCache's free list does in a
 * decode loop of B sequences growing together (sequence b's page j at pool block j·B + b).
 * Each attnlab row records the GPU's power state over each timing where NVML answers (`power`, `kernelsPower`:
 * % of the time the power limit held it below its clocks, mean W, over NVML's ~100 ms refreshes; a timing under
 * 250 ms, as the kernels-alone one often is, has none: src/bench/gpu-power.ts), and when its two
 * timings ran (`measuredAt`, UTC), so that a log of the GPU's clocks and
 * power (nvidia-smi --query-gpu=clocks.sm,power.draw --format=csv -lms 200) can be read beside it:
 * back to back at ~4.4 TB/s the H200 runs at its 700 W cap and lowers its SM clocks.
 * The results file is rewritten after every shape, so a run cut short keeps the shapes it finished.
 */
import { execFileSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { attention } from '../../src/api/attention.js';
import { applyDecodeTuning, type DecodeTuning } from '../../src/backends/cuda/flash/decode/decode-splits.js';
import { getCudaContext } from '../../src/backends/cuda/runtime/context.js';
import { clearInt32Cache } from '../../src/backends/cuda/runtime/int32-cache.js';
import { emptyCache } from '../../src/backends/cuda/runtime/memory.js';
import type { AttentionOptions } from '../../src/backends/problem.js';
import { gpuPowerProbe } from '../../src/bench/gpu-power.js';
import { timeHostHidden } from '../../src/bench/hidden-host.js';
import { attnlabCommit, commandLine, describeMachine } from '../../src/bench/machine.js';
import { InvalidArgumentError } from '../../src/errors.js';
import { HBM_PEAK_GBS } from '../../src/results/schema.js';
import type { Tensor } from '../../src/tensor/tensor.js';
import {
  type DecodeRow,
  deviceRandom,
  medianMs,
  pageTable,
  TABLE_ORDERS,
  type TableOrder,
} from './decode-timing.js';

const args = process.argv.slice(2);
const option = (name: string, fallback: string) =>
  args.includes(name) ? args[args.indexOf(name) + 1] : fallback;
const out = option('--out', 'decode-bench.json');
const python = option('--torch', 'python3');
const quick = args.includes('--quick');
const impls = option('--impl', 'flash').split(',') as Array<'flash' | 'cudnn' | 'auto'>;
const spare = args.includes('--table-room') ? 1 : 0;
const uncached = !args.includes('--no-uncached');
const implementation = (impl: string) => (impl === 'auto' ? undefined : (impl as 'flash' | 'cudnn'));
const batch = Number(option('--batch', '20'));
const hostHidden = !args.includes('--no-kernels-alone');
const emptyPool = args.includes('--empty-pool');
const tableOrder = option('--table-order', 'shuffled') as TableOrder;
if (!TABLE_ORDERS.includes(tableOrder))
  throw new InvalidArgumentError('--table-order', TABLE_ORDERS.join(', '), tableOrder);
const tuning = JSON.parse(option('--tuning', '{}')) as DecodeTuning;
applyDecodeTuning(tuning, '--tuning');
const [N, H, REPEATS] = [32, 128, 30];

interface Shape {
  B: number;
  S: number;
  K: number;
}
const shapesOption = option('--shapes', '');
const layouts = option('--layouts', 'dense,paged16,paged64').split(',');
const SHAPES: Shape[] = shapesOption
  ? shapesOption.split(',').map((t) => {
      const [B, S, K] = t.split(':').map(Number);
      return { B, S, K };
    })
  : quick
    ? [{ B: 64, S: 16384, K: 8 }]
    : [
        { B: 64, S: 16384, K: 8 },
        { B: 8, S: 131072, K: 8 },
        { B: 128, S: 8192, K: 8 },
        { B: 64, S: 16384, K: 4 },
        { B: 64, S: 16384, K: 1 },
        ...[2048, 8192, 32768].map((S) => ({ B: 1, S, K: 8 })),
      ];

const time = (call: () => Tensor) => medianMs(call, REPEATS, 300, batch);

type Row = DecodeRow;

const rows: Row[] = [];
const bytesOf = (s: Shape) => 2 * (2 * s.B * s.S * s.K * H + 2 * s.B * N * H);
const gbs = (s: Shape, ms: number) => bytesOf(s) / (ms * 1e-3) / 1e9;
const record = (
  s: Shape,
  label: string,
  layout: string,
  ms: number,
  variant?: string,
  hidden?: { deviceMs: number; hostMs: number },
) => {
  const GBs = gbs(s, ms);
  rows.push({
    label,
    ...s,
    N,
    H,
    layout,
    variant,
    ms,
    bandwidthGBs: GBs,
    bandwidthPercent: (100 * GBs) / HBM_PEAK_GBS,
    ...(hidden && {
      kernelsMs: hidden.deviceMs,
      kernelsGBs: gbs(s, hidden.deviceMs),
      hostUsPerCall: hidden.hostMs * 1000,
    }),
  });
};

/** Times `impl` on one layout of `s`, or records why it cannot run. */
function measure(
  s: Shape,
  impl: string,
  layout: string,
  run: () => { output: Tensor; variant: string; backend: string },
): void {
  let variant = '';
  try {
    const call = () => {
      const r = run();
      variant = impl === 'auto' ? `${r.backend}: ${r.variant}` : r.variant;
      return r.output;
    };
    const started = new Date().toISOString();
    const endPerCall = gpuPowerProbe()?.start();
    const ms = time(call);
    const power = endPerCall?.();
    const timed = new Date().toISOString();
    let hidden: ReturnType<typeof timeHostHidden> | undefined;
    let kernelsReason: string | undefined;
    const endKernels = hostHidden ? gpuPowerProbe()?.start() : undefined;
    try {
      hidden = hostHidden ? timeHostHidden(call, { samples: REPEATS, batch }) : undefined;
    } catch (error) {
      kernelsReason = (error as Error).message;
    }
    const kernelsPower = endKernels?.();
    record(s, `attnlab ${impl} ${layout}`, layout, ms, variant, hidden);
    const row = rows[rows.length - 1];
    if (power) row.power = power;
    if (kernelsPower && hidden) row.kernelsPower = kernelsPower;
    row.measuredAt = {
      perCall: [started, timed],
      ...(hidden && { kernels: [timed, new Date().toISOString()] }),
    };
    if (kernelsReason) row.kernelsReason = kernelsReason;
  } catch (error) {
    rows.push({ label: `attnlab ${impl} ${layout}`, ...s, N, H, layout, reason: (error as Error).message });
  }
}

let torchVersion = '';
let header: Record<string, unknown> | undefined;
function writeResults(): void {
  header ??= {
    kind: 'decode-bench',
    command: commandLine(),
    commit: attnlabCommit(),
    machine: describeMachine(),
    callsPerEventPair: batch,
    decodeTuning: tuning,
    ...(emptyPool && { emptyPool }),
    ...(tableOrder !== 'shuffled' && { tableOrder }),
  };
  writeFileSync(
    out,
    `${JSON.stringify({ ...header, torch: torchVersion, peakGBs: HBM_PEAK_GBS, rows }, null, 2)}\n`,
  );
}

getCudaContext();
SHAPES.forEach((s, index) => {
  const q = deviceRandom([s.B, 1, N, H], 10 * index + 1);
  {
    const k = deviceRandom([s.B, s.S, s.K, H], 10 * index + 2);
    const v = deviceRandom([s.B, s.S, s.K, H], 10 * index + 3);
    if (layouts.includes('dense'))
      for (const impl of impls)
        measure(s, impl, 'dense', () => attention(q, k, v, { implementation: implementation(impl) }));
    k.dispose();
    v.dispose();
  }
  for (const blockSize of [16, 64]) {
    if (!layouts.includes(`paged${blockSize}`)) continue;
    const table = pageTable(s.B, s.S, blockSize, spare, tableOrder);
    const numBlocks = s.B * Math.ceil(s.S / blockSize);
    const k = deviceRandom([numBlocks, blockSize, s.K, H], 10 * index + 4);
    const v = deviceRandom([numBlocks, blockSize, s.K, H], 10 * index + 5);
    const lengths = Array.from({ length: s.B }, () => s.S);
    for (const impl of impls) {
      const options: AttentionOptions = {
        implementation: implementation(impl),
        blockTable: table,
        keyValueSeqLengths: lengths,
      };
      measure(s, impl, `paged${blockSize}`, () => attention(q, k, v, options));
      if (s.B === 1 && uncached)
        measure(s, impl, `paged${blockSize} uncached`, () => {
          clearInt32Cache();
          return attention(q, k, v, options);
        });
    }
    k.dispose();
    v.dispose();
  }
  q.dispose();
  if (emptyPool) emptyCache();
  writeResults();
});

if (python !== 'none')
  try {
    const script = join(dirname(fileURLToPath(import.meta.url)), 'decode_torch_peer.py');
    const request = JSON.stringify({
      cases: SHAPES.map((s) => ({ ...s, N, H })),
      repeats: REPEATS,
      batch,
      hidden: hostHidden,
    });
    const answer = JSON.parse(
      execFileSync(python, [script, request], { encoding: 'utf8', maxBuffer: 1 << 24 }),
    );
    torchVersion = answer.torch;
    for (const r of answer.rows) {
      const s = SHAPES[r.case];
      if (r.error) rows.push({ label: `torch ${r.impl}`, ...s, N, H, layout: 'dense', reason: r.error });
      else
        record(
          s,
          `torch ${r.impl}`,
          'dense',
          r.ms,
          undefined,
          r.kernelsMs ? { deviceMs: r.kernelsMs, hostMs: r.hostUsPerCall / 1000 } : undefined,
        );
    }
  } catch (error) {
    console.error(`torch peer did not run: ${(error as Error).message.split('\n')[0]}`);
  }

writeResults();
console.log(
  'shape                    attnlab         GB/s (% peak)       best torch  ratio  | kernels alone: GB/s  best torch  ratio  host µs/call',
);
const bestOf = (rs: Row[], key: 'bandwidthGBs' | 'kernelsGBs') =>
  rs.reduce((a, r) => Math.max(a, r[key] ?? 0), 0);
for (const s of SHAPES) {
  const same = rows.filter((r) => r.B === s.B && r.S === s.S && r.K === s.K);
  const torch = same.filter((r) => r.label.startsWith('torch') && r.bandwidthGBs);
  const best = bestOf(torch, 'bandwidthGBs');
  const bestAlone = bestOf(torch, 'kernelsGBs');
  const ratio = (mine: number | undefined, theirs: number, dense: boolean) =>
    mine && theirs && dense ? (mine / theirs).toFixed(2) : '';
  for (const r of same.filter((x) => x.label.startsWith('attnlab'))) {
    if (r.reason) {
      console.log(`B=${s.B} S=${s.S} K=${s.K}`.padEnd(25) + `${r.label}: ${r.reason.slice(0, 120)}`);
      continue;
    }
    const dense = r.layout === 'dense';
    console.log(
      `B=${s.B} S=${s.S} K=${s.K}`.padEnd(25) +
        r.label.replace('attnlab ', '').padEnd(16) +
        `${r.bandwidthGBs!.toFixed(0)} (${r.bandwidthPercent!.toFixed(1)}%)`.padEnd(20) +
        `${best ? best.toFixed(0) : '-'}`.padEnd(12) +
        ratio(r.bandwidthGBs, best, dense).padEnd(7) +
        '| ' +
        `${r.kernelsGBs ? r.kernelsGBs.toFixed(0) : '-'}`.padEnd(21) +
        `${bestAlone ? bestAlone.toFixed(0) : '-'}`.padEnd(12) +
        ratio(r.kernelsGBs, bestAlone, dense).padEnd(7) +
        (r.hostUsPerCall ? r.hostUsPerCall.toFixed(1) : '-'),
    );
  }
  for (const r of torch)
    console.log(
      `B=${s.B} S=${s.S} K=${s.K}`.padEnd(25) +
        r.label.padEnd(16) +
        `${r.bandwidthGBs!.toFixed(0)} (${r.bandwidthPercent!.toFixed(1)}%)`.padEnd(39) +
        '| ' +
        `${r.kernelsGBs ? r.kernelsGBs.toFixed(0) : '-'}`.padEnd(40) +
        (r.hostUsPerCall ? r.hostUsPerCall.toFixed(1) : '-'),
    );
}
