/**
 * attnlab's cuDNN backend against JAX's and PyTorch's cuDNN attention, on the H200 (not a test:
 * it measures, it does not assert). Writes bench/results/cudnn-vs-peers.json.
 *
 * - B=4, T=S=8192, N=16, H=128 bf16, causal and not: CUDA events around each call, median over
 *   rotated inputs after a warm-up (src/bench measureAttnlabCase and the peer scripts; JAX has no
 *   per-call device timer, its peer reports wall time with block_until_ready).
 * - B=4, T=128, N=8, H=64 bf16: wall time per call with a device sync after each (host dispatch
 *   included), and a burst of calls with one sync, the same way for all three (cudnn-bench-peers.py).
 *
 * Run: node --import tsx bench/cudnn/cudnn-bench.ts [out.json]   (ATTNLAB_BENCH_PEERS=0: attnlab only)
 */
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { attention } from '../../src/api/attention.js';
import { synchronize } from '../../src/backends/cuda/context.js';
import { loadCudnn } from '../../src/backends/cuda/ffi/cudnn.js';
import { findPython } from '../../src/bench/peers.js';
import { makeResults } from '../../src/bench/results.js';
import { runSweeps } from '../../src/bench/run-bench.js';
import { median } from '../../src/bench/stats.js';
import { saveResults } from '../../src/results/files.js';
import type { ResultRow } from '../../src/results/schema.js';
import { randomNormal } from '../../src/tensor/random.js';

const OUT = process.argv[2] ?? 'bench/results/cudnn-vs-peers.json';
// Dense bf16 matmul on the H200 (cuBLASLt, measured once), given so nothing re-measures it.
const CEILING_TFLOPS = 802;
const small = { B: 4, T: 128, N: 8, H: 64 };
const withPeers = process.env.ATTNLAB_BENCH_PEERS !== '0';

/** attnlab's small-shape wall times, measured as the Python script measures the peers. */
function attnlabWall(repeats: number) {
  const [q, k, v] = [0, 1, 2].map((i) =>
    randomNormal([small.B, small.T, small.N, small.H], { seed: i, dtype: 'bfloat16' }).to('cuda'),
  );
  const call = () => attention(q, k, v, { implementation: 'cudnn' }).output.dispose();
  for (let i = 0; i < 20; i++) call();
  synchronize();
  const perCall: number[] = [];
  for (let i = 0; i < repeats; i++) {
    const t0 = performance.now();
    call();
    synchronize();
    perCall.push(performance.now() - t0);
  }
  const t0 = performance.now();
  for (let i = 0; i < repeats; i++) call();
  synchronize();
  const burstMsPerCall = (performance.now() - t0) / repeats;
  return { syncedMedianMs: median(perCall), syncedMinMs: Math.min(...perCall), burstMsPerCall };
}

const run = await runSweeps(
  [
    {
      name: 'cudnn-large',
      spec: {
        batch: [4],
        seq: [8192],
        heads: [16],
        headDim: [128],
        dtype: ['bfloat16'],
        causal: [false, true],
        impl: ['cudnn'],
      },
    },
    {
      name: 'cudnn-small',
      spec: {
        batch: [small.B],
        seq: [small.T],
        heads: [small.N],
        headDim: [small.H],
        dtype: ['bfloat16'],
        causal: [false],
        impl: ['cudnn'],
      },
    },
  ],
  {
    measure: { warmup: 10, repeats: 100, minRepeats: 30, budgetMs: 3000, checkError: true },
    peers: withPeers ? ['jax', 'torch'] : [],
    peerImpls: { jax: ['cudnn'], torch: ['cudnn'] },
    ceiling: CEILING_TFLOPS,
  },
);

const wall = { attnlab: attnlabWall(300), ...(withPeers ? peerWall(300) : {}) };
const notes = [
  ...run.notes,
  `cuDNN loaded by attnlab: ${loadCudnn().description}`,
  `small-shape wall ms per call (B=${small.B},T=${small.T},N=${small.N},H=${small.H} bf16; synced = call + device sync, median of 300; burst = 300 calls, one sync): ${JSON.stringify(wall)}`,
];
saveResults(OUT, makeResults('bench', { rows: run.rows, peers: run.peers, ceiling: run.ceiling, notes }));

const line = (r: ResultRow) =>
  `${r.source.padEnd(8)} ${r.impl.padEnd(6)} T=${r.T} causal=${r.causal} ${r.status} ` +
  `${r.timing ? `median ${r.timing.ms.median.toFixed(4)} ms (${r.timing.method})` : (r.reason ?? '')} ` +
  `${r.tflops ? `${r.tflops.toFixed(1)} TFLOP/s` : ''} err ${r.maxError ?? '-'} ${r.variant ?? ''}`;
console.log(run.rows.map(line).join('\n'));
for (const causal of [false, true]) {
  const large = run.rows.filter((r) => r.T === 8192 && r.causal === causal && r.tflops);
  const ours = large.find((r) => r.source === 'attnlab')?.tflops ?? 0;
  const best = Math.max(0, ...large.filter((r) => r.source !== 'attnlab').map((r) => r.tflops ?? 0));
  console.log(
    `large ${causal ? 'causal' : 'non-causal'}: attnlab ${ours.toFixed(1)} vs best peer ${best.toFixed(1)} TFLOP/s = ${(ours / best).toFixed(3)}x`,
  );
}
console.log(`small wall: ${JSON.stringify(wall)}`);
console.log(`wrote ${OUT}`);

function peerWall(repeats: number): Record<string, unknown> {
  const script = fileURLToPath(new URL('./cudnn-bench-peers.py', import.meta.url));
  const args = [script, ...[small.B, small.T, small.N, small.H, repeats].map(String)];
  const env = { ...process.env, XLA_PYTHON_CLIENT_PREALLOCATE: 'false', TF_CPP_MIN_LOG_LEVEL: '2' };
  const found = findPython('torch');
  if ('reason' in found) return { peers: found.reason };
  const child = spawnSync(found.python, args, { env, encoding: 'utf8' });
  try {
    return JSON.parse(child.stdout.trim().split('\n').pop() ?? '');
  } catch {
    return { peers: `failed (${child.status}): ${child.stderr.trim().split('\n').slice(-2).join(' | ')}` };
  }
}
