/**
 * Issue 12 §5's parity run: attnlab's cudnn backend beside JAX's and PyTorch's cuDNN attention (their
 * cuDNN paths only: `attnlab bench --peers` also times every other peer backend, which at T=8192
 * includes unfused ones that take minutes), B=4, T=S=8192, N=16, H = 64, 128, 256, causal and not,
 * bf16, in one run with one timing method (src/bench: CUDA events around each call after a settle
 * phase; JAX, which has no per-call device timer, wall time with block_until_ready). Not a test.
 *
 * Usage on the GPU: node --import tsx bench/cudnn/parity-bench.ts out.json [peers]
 *   peers: 'jax,torch' (default) or 'none' (attnlab alone, e.g. on another cuDNN via ATTNLAB_CUDNN).
 * Budget knobs as environment variables: PARITY_REPEATS (20), PARITY_BUDGET_MS (150),
 * PARITY_SETTLE_MS (200); PARITY_CEILING, the matmul TFLOP/s for "% peak" (893, measured on this
 * H200 in bench/results/2026-12-01-hopper), so the run does not re-measure it.
 */
import { loadCudnn } from '../../src/backends/cuda/ffi/cudnn.js';
import type { PeerName } from '../../src/bench/peers.js';
import { makeResults } from '../../src/bench/results.js';
import { runSweeps } from '../../src/bench/run-bench.js';
import { saveResults } from '../../src/results/files.js';
import type { ResultRow } from '../../src/results/schema.js';

const out = process.argv[2] ?? 'parity.json';
const peerList = process.argv[3] ?? 'jax,torch';
const peers = (peerList === 'none' ? [] : peerList.split(',')) as PeerName[];
const env = (name: string, fallback: number) => Number(process.env[name] ?? fallback);

// One group per head dim, causal inside it: both rows of a shape then share one set of host inputs
// (measure.ts keeps the last set; drawing one at H=256 takes ~1 s per tensor).
const run = await runSweeps(
  [64, 128, 256].map((H) => ({
    name: 'cudnn-parity',
    spec: {
      batch: [4],
      seq: [8192],
      heads: [16],
      headDim: [H],
      dtype: ['bfloat16' as const],
      causal: [false, true],
      impl: ['cudnn' as const],
    },
  })),
  {
    measure: {
      warmup: 3,
      repeats: env('PARITY_REPEATS', 20),
      minRepeats: 10,
      budgetMs: env('PARITY_BUDGET_MS', 150),
      settleMs: env('PARITY_SETTLE_MS', 200),
      checkError: true,
    },
    peers,
    peerImpls: { jax: ['cudnn'], torch: ['cudnn'] },
    ceiling: env('PARITY_CEILING', 893),
  },
);
const cudnn = (() => {
  try {
    return loadCudnn().description;
  } catch (error) {
    return `none (${(error as Error).message.split('\n')[0]})`;
  }
})();
const notes = [...run.notes, `cuDNN loaded by attnlab: ${cudnn}`];
saveResults(out, makeResults('bench', { rows: run.rows, peers: run.peers, ceiling: run.ceiling, notes }));

const tf = (r: ResultRow | undefined) => (r?.tflops ? r.tflops.toFixed(1) : r ? r.status : '-');
console.log(`attnlab's cuDNN: ${cudnn}`);
console.log('H    causal  attnlab  jax     torch   attnlab/best peer   attnlab variant');
for (const H of [64, 128, 256])
  for (const causal of [false, true]) {
    const of = (source: string) =>
      run.rows.find((r) => r.source === source && r.H === H && r.causal === causal);
    const ours = of('attnlab');
    const best = Math.max(0, ...['jax', 'torch'].map((s) => of(s)?.tflops ?? 0));
    const ratio = ours?.tflops && best > 0 ? (ours.tflops / best).toFixed(3) : '-';
    console.log(
      `${String(H).padEnd(4)} ${String(causal).padEnd(7)} ${tf(ours).padEnd(8)} ${tf(of('jax')).padEnd(7)} ` +
        `${tf(of('torch')).padEnd(7)} ${ratio.padEnd(19)} ${ours?.variant ?? ours?.reason ?? ''}`,
    );
  }
console.log(`wrote ${out}`);
