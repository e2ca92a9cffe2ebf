/**
 * Experiment: the host cost of one attention call at a small shape (the codelab's default,
 * B=4, T=128, N=8, H=64 bf16), where the kernel takes a few µs and dispatch decides the wall time.
 * Reports the wall time per call of back-to-back calls (synchronised once at the end) and of the
 * enqueue alone; run it under `node --cpu-prof` to see where the host time goes.
 *
 * Run on a GPU: node --import tsx [--cpu-prof --cpu-prof-dir DIR] bench/experiments/dispatch.ts [impl] [calls]
 */
import { attention } from '../../src/api/attention.js';
import { synchronize } from '../../src/backends/cuda/context.js';
import type { Implementation } from '../../src/backends/problem.js';
import { seededInput } from '../../src/bench/measure.js';

const impl = (process.argv[2] ?? 'cudnn') as Implementation;
const calls = Number(process.argv[3] ?? 20000);
const [B, T, N, H] = [4, 128, 8, 64];
const [q, k, v] = [1, 2, 3].map((seed) => seededInput([B, T, N, H], seed, 'bfloat16').to('cuda'));
const call = () => attention(q, k, v, { implementation: impl }).output.dispose();

for (let i = 0; i < 200; i++) call();
synchronize();
for (let round = 0; round < 3; round++) {
  const t0 = performance.now();
  for (let i = 0; i < calls; i++) call();
  const enqueued = performance.now();
  synchronize();
  const t1 = performance.now();
  console.log(
    `${impl} B=${B} T=${T} N=${N} H=${H}: wall ${((1e3 * (t1 - t0)) / calls).toFixed(2)} µs/call ` +
      `(enqueue ${((1e3 * (enqueued - t0)) / calls).toFixed(2)} µs/call) over ${calls} calls`,
  );
}
