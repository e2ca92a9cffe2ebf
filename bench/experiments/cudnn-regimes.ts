/**
 * Experiment: attnlab's cudnn backend at one shape, timed the three ways cudnn-peers-probe.py times
 * JAX and PyTorch (synced per call, burst after settling, CUDA events back to back), so that the
 * three libraries can be compared under the same regime. Prints the plan's engine and kernel.
 *
 * Run on a GPU: node --import tsx bench/experiments/cudnn-regimes.ts B T N H [repeats]
 */
import { attention } from '../../src/api/attention.js';
import { synchronize } from '../../src/backends/cuda/context.js';
import { attentionFlops } from '../../src/backends/problem.js';
import { timeOnStream } from '../../src/bench/cuda-timer.js';
import { seededInput } from '../../src/bench/measure.js';

const [B, T, N, H, repeats = 30] = process.argv.slice(2).map(Number);
const SETTLE_MS = 300;
const q = seededInput([B, T, N, H], 1, 'bfloat16').to('cuda');
const k = seededInput([B, T, N, H], 2, 'bfloat16').to('cuda');
const v = seededInput([B, T, N, H], 3, 'bfloat16').to('cuda');

for (const isCausal of [false, true]) {
  const call = () => attention(q, k, v, { isCausal, implementation: 'cudnn' });
  const first = call();
  const variant = first.variant;
  first.output.dispose();
  synchronize();
  const started = performance.now();
  while (performance.now() - started < SETTLE_MS) {
    for (let i = 0; i < 8; i++) call().output.dispose();
    synchronize();
  }
  let t0 = performance.now();
  for (let i = 0; i < repeats; i++) call().output.dispose();
  synchronize();
  const burstMs = (performance.now() - t0) / repeats;
  const synced: number[] = [];
  for (let i = 0; i < repeats; i++) {
    t0 = performance.now();
    call().output.dispose();
    synchronize();
    synced.push(performance.now() - t0);
  }
  synced.sort((a, b) => a - b);
  const eventsMs = timeOnStream(() => call().output.dispose(), { iterations: repeats, warmup: 3 }).median;
  const work = attentionFlops({ B, N, T, S: T, H, causal: isCausal });
  const tflops = (ms: number) => Math.round(work / (ms * 1e-3) / 1e12);
  const found = { burstMs, syncedMedianMs: synced[synced.length >> 1], eventsMedianMs: eventsMs };
  const rates = Object.fromEntries(
    Object.entries(found).map(([key, ms]) => [key.replace('Ms', 'Tflops'), tflops(ms)]),
  );
  console.log(JSON.stringify({ peer: 'attnlab', B, T, N, H, causal: isCausal, ...found, ...rates, variant }));
}
