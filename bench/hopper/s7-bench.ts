/**
 * Session 7's library bench for the Hopper kernel (issue 14): attnlab's flash (the wgmma kernel, the
 * default on sm_90a) beside attnlab's cudnn in the same run, settled as `attnlab bench` settles: the
 * headline shape (B=4, T=S=8192, N=16, H = 64/128/256) and the short end of the T sweep at B·T = 32k
 * (T = 1024, 2048; H=128), causal and not. No PyTorch rows: the device call that runs it is short
 * (s6-bench.ts has the peers). Writes one results JSON and prints the table with the ratios last.
 *
 *   node --import tsx bench/hopper/s7-bench.ts <out.json> [--flash-only] [--smoke]
 * --flash-only: attnlab flash alone (a second tree's variant, beside the first run's cudnn rows).
 * --smoke: a tiny shape on whatever device there is, flash and the CPU reference (checks the script).
 */
import { cudaAvailable } from '../../src/backends/cuda/context.js';
import { makeResults } from '../../src/bench/results.js';
import { type BenchRun, runSweeps, type SweepGroup } from '../../src/bench/run-bench.js';
import type { SweepSpec } from '../../src/bench/sweep.js';
import { saveResults } from '../../src/results/files.js';
import type { ResultRow } from '../../src/results/schema.js';

const out = process.argv[2];
if (!out) throw new Error('usage: s7-bench.ts <out.json> [--smoke]');
const smoke = process.argv.includes('--smoke');
const flashOnly = process.argv.includes('--flash-only');
if (!smoke && !cudaAvailable().ok) throw new Error('s7-bench needs a CUDA device');

const impl: SweepSpec['impl'] = smoke ? ['flash', 'reference'] : flashOnly ? ['flash'] : ['flash', 'cudnn'];
const spec = (B: number, T: number, H: number[]): SweepSpec => ({
  impl,
  dtype: ['bfloat16'],
  causal: [false, true],
  batch: [B],
  seq: [T],
  heads: [16],
  headDim: H,
});
const groups: SweepGroup[] = smoke
  ? [{ name: 'smoke', spec: spec(1, 64, [64]) }]
  : [
      { name: 'headline', spec: spec(4, 8192, [64, 128, 256]) },
      { name: 'T sweep B·T=32k', spec: spec(32, 1024, [128]) },
      { name: 'T sweep B·T=32k', spec: spec(16, 2048, [128]) },
    ];
const measure = smoke
  ? { repeats: 3, budgetMs: 10, settleMs: 0, warmup: 1, checkError: false }
  : { repeats: 30, budgetMs: 250, settleMs: 300, checkError: false };
const save = (run: BenchRun) => saveResults(out, makeResults('bench', run));
const run = await runSweeps(groups, { measure, ceiling: 893, onPartial: save });
save(run);

const key = (r: ResultRow) => `${r.B}x${r.T}x${r.N} H=${r.H}${r.causal ? ' causal' : ''}`;
const byShape = new Map<string, Map<string, ResultRow>>();
for (const r of run.rows) {
  if (r.status !== 'ok' || r.tflops === undefined) continue;
  if (!byShape.has(key(r))) byShape.set(key(r), new Map());
  byShape.get(key(r))!.set(r.impl, r);
}
const other = smoke ? 'reference' : 'cudnn';
console.log(`\nTFLOP/s (bf16), same run\nshape | flash | ${other} | flash/${other} | flash variant`);
for (const [shape, m] of byShape) {
  const f = m.get('flash')?.tflops;
  const c = m.get(other)?.tflops;
  console.log(
    [
      shape,
      f?.toFixed(1) ?? '-',
      c?.toFixed(1) ?? '-',
      f && c ? (f / c).toFixed(3) : '-',
      m.get('flash')?.variant?.replace('flash-fwd.sm_90a.', '') ?? '',
    ].join(' | '),
  );
}
for (const n of run.notes) console.log(`note: ${n}`);
