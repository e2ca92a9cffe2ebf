/**
 * Times attnlab's naive CUDA attention against the codelab's naive JAX path in one run, at the
 * issue's shape B=4, T=S=4096, N=K=8, H=64: float32 exact ('highest'), float32 on TF32, bfloat16.
 * CUDA events around each call, 3 warm-up calls, median of 20; JAX is timed its own way (wall clock
 * with block_until_ready, median of 20) by bench/naive/jax_naive.py. Also records the peak device
 * memory of one call (the (B,N,T,S) scores) and the machine. Writes JSON, prints a table.
 *
 *   node --import tsx bench/naive/naive-bench.ts --out naive.json [--jax]
 */
import { execFileSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { attention } from '../../src/api/attention.js';
import { getCudaContext } from '../../src/backends/cuda/context.js';
import { memoryStats, resetPeakMemory } from '../../src/backends/cuda/memory.js';
import { attentionFlops } from '../../src/backends/problem.js';
import { timeOnStream } from '../../src/bench/cuda-timer.js';
import { attnlabCommit, describeMachine } from '../../src/bench/machine.js';
import { Tensor } from '../../src/tensor/tensor.js';

const args = process.argv.slice(2);
const out = args.includes('--out') ? args[args.indexOf('--out') + 1] : 'naive-bench.json';
const [B, T, N, H] = [4, 4096, 8, 64];
const [ITERATIONS, WARMUP] = [20, 3];

/** Uniform values in [−2, 2) from a xorshift, rounded to `dtype`: 8M values in well under a second. */
function randomInput(seed: number, dtype: 'float32' | 'bfloat16'): Tensor {
  const n = B * T * N * H;
  const values = new Float32Array(n);
  let x = seed >>> 0 || 1;
  for (let i = 0; i < n; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    values[i] = ((x >>> 0) / 2 ** 32) * 4 - 2;
  }
  const f32 = Tensor.fromRaw(values, [B, T, N, H], 'float32');
  return (dtype === 'float32' ? f32 : f32.astype(dtype)).to('cuda');
}

interface Row {
  mode: string;
  variant: string;
  ms: number;
  p10: number;
  p90: number;
  tflops: number;
  peakMemoryBytes: number;
  jaxMs?: number;
  ratioToJax?: number;
}

getCudaContext();
const rows: Row[] = [];
const modes = [
  { mode: 'float32 highest', dtype: 'float32', float32Precision: 'highest', jax: ['float32', 'highest'] },
  { mode: 'float32 tf32', dtype: 'float32', float32Precision: 'tf32', jax: ['float32', 'default'] },
  { mode: 'bfloat16', dtype: 'bfloat16', float32Precision: 'highest', jax: ['bfloat16', 'default'] },
] as const;
for (const m of modes) {
  const [q, k, v] = [11, 12, 13].map((s) => randomInput(s, m.dtype));
  const options = { implementation: 'naive', float32Precision: m.float32Precision } as const;
  let variant = '';
  resetPeakMemory();
  const before = memoryStats().currentBytes;
  const first = attention(q, k, v, options);
  const peakMemoryBytes = memoryStats().peakBytes - before;
  variant = first.variant;
  first.output.dispose();
  const timing = timeOnStream(() => attention(q, k, v, options).output.dispose(), {
    iterations: ITERATIONS,
    warmup: WARMUP,
  });
  const tflops = attentionFlops({ B, N, T, S: T, H }) / (timing.median * 1e-3) / 1e12;
  rows.push({
    mode: m.mode,
    variant,
    ms: timing.median,
    p10: timing.p10,
    p90: timing.p90,
    tflops,
    peakMemoryBytes,
  });
  console.log(
    `${m.mode}: ${timing.median.toFixed(3)} ms (p10 ${timing.p10.toFixed(3)}, p90 ${timing.p90.toFixed(3)}) ${tflops.toFixed(1)} TFLOP/s, peak ${(peakMemoryBytes / 2 ** 30).toFixed(2)} GiB`,
  );
  for (const t of [q, k, v]) t.dispose();
}

let jax: {
  jax: string;
  device: string;
  rows: Array<{ dtype: string; precision: string; ms: number; tflops: number }>;
} | null = null;
if (args.includes('--jax')) {
  const script = join(dirname(fileURLToPath(import.meta.url)), 'jax_naive.py');
  const request = JSON.stringify({ B, T, N, H, iterations: ITERATIONS, warmup: WARMUP });
  const text = execFileSync(process.env.PYTHON ?? 'python3', [script, request], {
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  jax = JSON.parse(text.trim().split('\n').at(-1) ?? '{}');
  for (const [i, m] of modes.entries()) {
    const peer = jax?.rows.find((r) => r.dtype === m.jax[0] && r.precision === m.jax[1]);
    if (!peer) continue;
    rows[i].jaxMs = peer.ms;
    rows[i].ratioToJax = rows[i].ms / peer.ms;
  }
}

console.log(
  `\nnaive attention, B=${B} T=S=${T} N=K=${N} H=${H}, median of ${ITERATIONS} after ${WARMUP} warm-up calls`,
);
console.log('| mode | attnlab ms | TFLOP/s | JAX naive ms (same precision) | attnlab / JAX |');
console.log('|---|---|---|---|---|');
for (const r of rows) {
  const jaxMs = r.jaxMs === undefined ? '–' : r.jaxMs.toFixed(3);
  const ratio = r.ratioToJax === undefined ? '–' : `${r.ratioToJax.toFixed(2)}×`;
  console.log(`| ${r.mode} | ${r.ms.toFixed(3)} | ${r.tflops.toFixed(1)} | ${jaxMs} | ${ratio} |`);
}
const command = `node --import tsx bench/naive/naive-bench.ts ${args.join(' ')}`;
writeFileSync(
  out,
  `${JSON.stringify({ command, commit: attnlabCommit(), shape: { B, T, S: T, N, K: N, H }, machine: describeMachine(), rows, jax }, null, 2)}\n`,
);
console.log(`wrote ${out}`);
