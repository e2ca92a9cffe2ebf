/**
 * The Hopper kernel's benches in one run (issue 14, session 6): the headline shape (B=4, T=S=8192,
 * N=16, H = 64/128/256), a T sweep at B·T = 32k (T = 1k…32k, H=128; its B=1, T=32k point is the long
 * context), and GQA (K=4, H=128), each causal and not, through attnlab's flash (the wgmma kernel)
 * and cudnn backends, then PyTorch's flash and cuDNN backends on them (the headline shape with its peers
 * first, then the rest with theirs: one Python process each), then the
 * headline shape on the mma.sync kernel (ATTNLAB_FLASH_KERNEL=mma). Same settling as `attnlab
 * bench`. Writes one results JSON (what finished is kept when a time limit stops it) and prints a
 * table with the ratios last. Session 6's calls stopped it during PyTorch's rows twice: the whole set's
 * attnlab rows took most of 180 s on a cold kernel and cuDNN plan cache (plan builds ~3 s each), and the
 * headline shape alone with PyTorch did not fit in 110 s — budget ≥ 150 s for the headline with its
 * peers and ~300 s for everything, or carry a warm cache.
 *
 *   node --import tsx bench/hopper/s6-bench.ts <out.json> [--quick] [--head-dims=192,…] [--no-peers]
 * --quick: the headline shape only (no sweep, no GQA), for a call short of time.
 * --head-dims: the headline shape's H list instead of 64,128,256 (session 8: 192).
 * --no-peers: attnlab's rows only (flash, cudnn, then the mma.sync kernel), no PyTorch process.
 * --smoke: a tiny shape on whatever device there is, attnlab only (checks this script on a CPU).
 */
import { cudaAvailable } from '../../src/backends/cuda/context.js';
import type { PeerName } from '../../src/bench/peers.js';
import { makeResults } from '../../src/bench/results.js';
import { type BenchRun, runSweeps, type SweepGroup } from '../../src/bench/run-bench.js';
import type { SweepSpec } from '../../src/bench/sweep.js';
import { reloadConfig } from '../../src/config.js';
import { saveResults } from '../../src/results/files.js';
import type { ResultRow } from '../../src/results/schema.js';

const out = process.argv[2];
if (!out) throw new Error('usage: s6-bench.ts <out.json> [--quick]');
const quick = process.argv.includes('--quick');
const smoke = process.argv.includes('--smoke');
const noPeers = process.argv.includes('--no-peers');
const headDimsFlag = process.argv.find((a) => a.startsWith('--head-dims='));
const headDims = headDimsFlag
  ? headDimsFlag.slice('--head-dims='.length).split(',').map(Number)
  : [64, 128, 256];
if (headDims.some((H) => !Number.isInteger(H) || H <= 0)) throw new Error(`--head-dims: ${headDimsFlag}`);
if (!smoke && !cudaAvailable().ok) throw new Error('s6-bench needs a CUDA device');

const base = { dtype: ['bfloat16'], causal: [false, true] } as const;
const spec = (B: number, T: number, H: number[], K?: number): Omit<SweepSpec, 'impl'> => ({
  ...base,
  dtype: [...base.dtype],
  causal: [...base.causal],
  batch: [B],
  seq: [T],
  heads: [16],
  kvHeads: K ? [K] : undefined,
  headDim: H,
});
const shapes: { name: string; spec: Omit<SweepSpec, 'impl'> }[] = [
  smoke ? { name: 'smoke', spec: spec(1, 64, [64]) } : { name: 'headline', spec: spec(4, 8192, headDims) },
];
if (!quick && !smoke) {
  for (const T of [1024, 2048, 4096, 16384, 32768])
    shapes.push({ name: 'T sweep B·T=32k', spec: spec(32768 / T, T, [128]) });
  shapes.push({ name: 'GQA K=4', spec: spec(4, 8192, [128], 4) });
}
const groups = (impl: SweepSpec['impl']): SweepGroup[] =>
  shapes.map((s) => ({ name: s.name, spec: { ...s.spec, impl } }));
const measure = smoke
  ? { repeats: 3, budgetMs: 10, settleMs: 0, warmup: 1, checkError: false }
  : { repeats: 30, budgetMs: 250, settleMs: 300, checkError: false };
const [attnlabImpls, peers]: [SweepSpec['impl'], PeerName[]] = smoke
  ? [['flash', 'reference'], []]
  : [['flash', 'cudnn'], noPeers ? [] : ['torch']];

const all: BenchRun = { rows: [], peers: [], ceiling: null, notes: [] };
const save = (extra?: BenchRun) => {
  const merged = extra
    ? {
        rows: [...all.rows, ...extra.rows],
        peers: [...all.peers, ...extra.peers],
        ceiling: all.ceiling ?? extra.ceiling,
        notes: [...all.notes, ...extra.notes],
      }
    : all;
  saveResults(out, makeResults('bench', merged));
};
const absorb = (run: BenchRun) => {
  all.rows.push(...run.rows);
  all.peers.push(...run.peers);
  all.notes.push(...run.notes);
  all.ceiling ??= run.ceiling;
  save();
};

// 1. attnlab flash (the Hopper kernel, the default on sm_90a) and cudnn, then PyTorch's flash and
// cuDNN backends on the same shapes: the headline shape with its peers first, then the rest with theirs,
// so a call cut short keeps a complete same-run comparison (session 6 lost PyTorch's rows twice when one
// sweep timed every attnlab shape before starting PyTorch).
const sweepOptions = {
  measure,
  ceiling: 893,
  peers,
  peerImpls: { torch: ['flash', 'cudnn'] },
  onPartial: (r: BenchRun) => save(r),
};
const attnlabGroups = groups(attnlabImpls);
absorb(await runSweeps(attnlabGroups.slice(0, 1), sweepOptions));
if (attnlabGroups.length > 1) absorb(await runSweeps(attnlabGroups.slice(1), sweepOptions));
// 2. The mma.sync kernel on the headline shape (the sweep's mma.sync numbers: earlier records).
process.env.ATTNLAB_FLASH_KERNEL = 'mma';
reloadConfig();
const mma = await runSweeps(groups(['flash']).slice(0, 1), {
  measure,
  ceiling: 893,
  onPartial: (r) => save(r),
});
for (const row of mma.rows) {
  row.impl = 'flash-mma';
  row.label = row.label.replace('attnlab flash', 'attnlab flash (mma.sync)');
}
absorb(mma);

// The table: TFLOP/s per shape and source, and the wgmma kernel over each peer.
const key = (r: ResultRow) => `${r.B}x${r.T}x${r.N}/${r.K} H=${r.H}${r.causal ? ' causal' : ''}`;
const bySource = new Map<string, Map<string, number>>();
const variants = new Map<string, string>();
for (const r of all.rows) {
  if (r.status !== 'ok' || r.tflops === undefined) continue;
  const col = `${r.source === 'attnlab' ? '' : `${r.source} `}${r.impl}`;
  if (!bySource.has(key(r))) bySource.set(key(r), new Map());
  bySource.get(key(r))!.set(col, r.tflops);
  if (r.source === 'attnlab' && r.impl === 'flash') variants.set(key(r), r.variant ?? '?');
}
const cols = ['flash', 'cudnn', 'flash-mma', 'torch flash', 'torch cudnn'];
console.log(
  `\nTFLOP/s (bf16), ratios = attnlab flash (wgmma) / column\n${['shape', ...cols, '/cudnn', '/mma', '/torch fa', '/torch cudnn', 'flash variant'].join(' | ')}`,
);
for (const [shape, m] of bySource) {
  const f = m.get('flash');
  const ratio = (c: string) => (f && m.get(c) ? (f / m.get(c)!).toFixed(3) : '-');
  console.log(
    [
      shape,
      ...cols.map((c) => m.get(c)?.toFixed(1) ?? '-'),
      ...['cudnn', 'flash-mma', 'torch flash', 'torch cudnn'].map(ratio),
      variants.get(shape)?.replace('flash-fwd.sm_90a.', '') ?? '',
    ].join(' | '),
  );
}
for (const n of all.notes) console.log(`note: ${n}`);
