/**
 * Context-parallel attention's speed rows (issue 17): B=1, N=K=16, H=128, bf16, causal, T = S = 128k
 * and 256k; one `attention` call on one GPU, then contextParallelAttention over P ranks with the
 * key/value exchange and without it (the compute and merges alone), each row carrying `gpus`,
 * `ranks`, `speedupOverOneGpu` and `exchange` (docs/results-schema.md).
 *
 * Groups: `--nccl` uses RingGroup.nccl(P) for every P the host has GPUs for (one rank per GPU; time
 * = host wall time of the call until every rank's stream has finished); without it, the loopback
 * group runs the P ranks one after another on GPU 0 (CUDA events), so its speedup is ≈ 1 by
 * construction, and the table "projected" gives what P GPUs would take if the exchange hides under
 * compute: Σ over steps of the slowest rank's event-timed work — a projection, not a measurement.
 *
 *   node --import tsx benchmarks/harnesses/context-parallel.ts --out ring.json [--T 131072,262144] [--ranks 2,4]
 *        [--impl cudnn|flash] [--repeats 5] [--nccl]
 *   node --import tsx benchmarks/harnesses/context-parallel.ts --cpu --out ring-cpu.json   (CPU smoke run, small sizes)
 */
import { attention } from '../../src/api/attention.js';
import { shardSequence } from '../../src/api/context-parallel.js';
import { RingGroup, transportOf } from '../../src/api/ring-group.js';
import { hostRingOps } from '../../src/api/ring-ops.js';
import { type RingProblem, type RunOptions, runRing } from '../../src/api/ring-run.js';
import { cu } from '../../src/backends/cuda/ffi/driver.js';
import { cudaRingOps } from '../../src/backends/cuda/ring/ops.js';
import {
  deviceContext,
  deviceCount,
  getCudaContext,
  onDevice,
} from '../../src/backends/cuda/runtime/context.js';
import { allocDevice, copyToDevice } from '../../src/backends/cuda/runtime/memory.js';
import { attentionFlops, type Implementation } from '../../src/backends/problem.js';
import { CudaEventTimer } from '../../src/bench/cuda-timer.js';
import { makeResults } from '../../src/bench/results.js';
import { summarize } from '../../src/bench/stats.js';
import { saveResults } from '../../src/results/files.js';
import type { ResultRow, ResultTable, SampleSummary, TimingMethod } from '../../src/results/schema.js';
import type { FloatDType } from '../../src/tensor/dtype.js';
import { randomNormal } from '../../src/tensor/random.js';
import { Tensor } from '../../src/tensor/tensor.js';

const args = process.argv.slice(2);
const option = (name: string, fallback: string) =>
  args.includes(name) ? args[args.indexOf(name) + 1] : fallback;
const cpu = args.includes('--cpu');
const nccl = args.includes('--nccl');
const out = option('--out', 'ring-bench.json');
const lengths = option('--T', cpu ? '64,128' : '131072,262144')
  .split(',')
  .map(Number);
const rankCounts = option('--ranks', '2,4').split(',').map(Number);
const impl = option('--impl', cpu ? 'flash' : 'cudnn') as Implementation;
const repeats = Number(option('--repeats', cpu ? '3' : '5'));
const [B, N, H] = cpu ? [1, 2, 16] : [1, 16, 128];
const dtype: FloatDType = cpu ? 'float32' : 'bfloat16';

/** Inputs whose bytes tile one seeded random block (values do not change the time), on the bench's device. */
function input(shape: number[], seed: number): Tensor {
  if (cpu) return randomNormal(shape, { seed, dtype });
  const elements = shape.reduce((a, d) => a * d, 1);
  const host = randomNormal([Math.min(elements, 1 << 20)], { seed, dtype }).data as Uint16Array;
  const tile = copyToDevice(new Uint8Array(host.buffer, host.byteOffset, host.byteLength));
  const t = Tensor.fromDeviceBuffer(allocDevice(elements * 2), shape, dtype);
  for (let at = 0; at < elements * 2; at += tile.bytes)
    cu().cuMemcpyDtoDAsync_v2(
      t.buffer.ptr + BigInt(at),
      tile.ptr,
      Math.min(tile.bytes, elements * 2 - at),
      getCudaContext().stream,
    );
  tile.release();
  return t;
}

/** Waits for every stream the call used: GPU 0's, or every rank's device for NCCL. */
function synchronizeAll(devices: readonly number[]): void {
  for (const d of devices) cu().cuStreamSynchronize(deviceContext(d).stream);
}

/** First call (wall ms), then `repeats` timed calls: CUDA events on GPU 0, or wall time with every device synchronised. */
function measure(
  call: () => Tensor[],
  devices: readonly number[],
): { first: number; ms: SampleSummary; method: TimingMethod } {
  const dispose = (ts: Tensor[]) => {
    for (const t of ts) t.dispose();
  };
  const started = performance.now();
  dispose(call());
  if (!cpu) synchronizeAll(devices);
  const first = performance.now() - started;
  const samples: number[] = [];
  if (!cpu && devices.length === 1) {
    const timer = new CudaEventTimer(repeats);
    for (let i = 0; i < repeats; i++) dispose(timer.time(call));
    samples.push(...timer.read());
    timer.dispose();
    return { first, ms: summarize(samples), method: 'cuda-events' };
  }
  for (let i = 0; i < repeats; i++) {
    const t0 = performance.now();
    const outs = call();
    if (!cpu) synchronizeAll(devices);
    samples.push(performance.now() - t0);
    dispose(outs);
  }
  return { first, ms: summarize(samples), method: cpu ? 'performance-now' : 'wall-block-until-ready' };
}

const rows: ResultRow[] = [];
const tables: ResultTable[] = [];
const notes: string[] = [];
const projected: string[][] = [];

function row(
  T: number,
  label: string,
  extra: Partial<ResultRow>,
  m?: ReturnType<typeof measure>,
  reason?: string,
): ResultRow {
  const flops = attentionFlops({ B, T, S: T, N, H, causal: true });
  const r: ResultRow = {
    sweep: 'ring',
    source: 'attnlab',
    impl,
    label,
    B,
    T,
    S: T,
    N,
    K: N,
    H,
    dtype,
    causal: true,
    status: m ? 'ok' : 'error',
    flops,
    ...extra,
  };
  if (reason) r.reason = reason;
  if (m) {
    r.timing = { method: m.method, ms: m.ms, firstCallMs: m.first, warmup: 1, inputCopies: 1 };
    r.tflops = flops / (m.ms.median * 1e-3) / 1e12;
  }
  rows.push(r);
  // Streamed as measured, so that a run cut short still shows what it timed.
  console.error(`[ring-bench] T=${T} ${label}: ${m ? `${m.ms.median.toFixed(2)} ms` : reason}`);
  return r;
}

if (!cpu) getCudaContext();
const available = cpu ? 1 : deviceCount();
for (const T of lengths) {
  const q = input([B, T, N, H], 1);
  const k = input([B, T, N, H], 2);
  const v = input([B, T, N, H], 3);
  let oneGpu = Number.NaN;
  try {
    const m = measure(() => [attention(q, k, v, { isCausal: true, implementation: impl }).output], [0]);
    oneGpu = m.ms.median;
    row(
      T,
      `attnlab ${impl} ${cpu ? 'one call (cpu)' : 'one GPU'}`,
      { gpus: 1, ranks: 1, speedupOverOneGpu: 1 },
      m,
    );
  } catch (error) {
    row(
      T,
      `attnlab ${impl} ${cpu ? 'one call (cpu)' : 'one GPU'}`,
      { gpus: 1, ranks: 1 },
      undefined,
      (error as Error).message,
    );
  }
  for (const P of rankCounts) {
    const useNccl = nccl && !cpu;
    if (useNccl && P > available) {
      notes.push(`T=${T} P=${P}: skipped, ${available} GPU(s) on this host`);
      continue;
    }
    const group = useNccl ? RingGroup.nccl(P) : RingGroup.loopback(P);
    const devices = useNccl ? group.devices : [0];
    const shard = (t: Tensor) =>
      shardSequence(t, P).map((s, r) =>
        useNccl && r > 0 ? onDevice(devices[r], () => s.toHost().to('cuda')) : s,
      );
    const [qs, ks, vs] = [q, k, v].map(shard);
    const problem: RingProblem = {
      P,
      B,
      T,
      S: T,
      N,
      Hv: H,
      dtype,
      query: qs,
      key: ks,
      value: vs,
      scale: 1 / Math.sqrt(H),
      causal: true,
      alignment: 'top_left',
      window: null,
      querySeqLengths: null,
      keyValueSeqLengths: null,
      implementation: impl,
      float32Precision: 'highest',
    };
    const transport = transportOf(group, cpu ? 'cpu' : 'cuda');
    const ops = cpu ? hostRingOps : cudaRingOps;
    const kind = useNccl ? `${P} GPUs nccl` : `P=${P} loopback on ${cpu ? 'the cpu' : '1 GPU'}`;
    for (const exchange of [true, false]) {
      const label = `attnlab ring ${impl} ${kind}${exchange ? '' : ' no exchange'}`;
      const extra = { gpus: useNccl ? P : 1, ranks: P, exchange };
      let variants: string[] = [];
      try {
        const run = (options: RunOptions = {}) => {
          const r = runRing(problem, ops, transport, { exchange, ...options });
          variants = r.variants;
          for (const t of r.logSumExps) t.dispose();
          return r.outputs;
        };
        const m = measure(run, devices);
        const r = row(T, label, { ...extra, speedupOverOneGpu: oneGpu / m.ms.median }, m);
        r.variant = variants.join(' | ');
        if (!useNccl && !cpu && exchange) {
          // One more run with every rank's work of every step timed by events: the projection.
          const timer = new CudaEventTimer(P * P);
          for (const t of run({ around: (_s, _r, work) => timer.time(work) })) t.dispose();
          const times = timer.read();
          timer.dispose();
          let total = 0;
          for (let s = 0; s < P; s++) total += Math.max(...times.slice(s * P, (s + 1) * P));
          const perRank = Array.from({ length: P }, (_, r) =>
            times.filter((_, i) => i % P === r).reduce((a, b) => a + b, 0),
          );
          console.error(
            `[ring-bench] T=${T} P=${P} projected ${total.toFixed(2)} ms (${(oneGpu / total).toFixed(2)}x)`,
          );
          projected.push([
            String(T),
            String(P),
            oneGpu.toFixed(1),
            total.toFixed(1),
            (oneGpu / total).toFixed(2),
            perRank.map((t) => t.toFixed(1)).join(' / '),
          ]);
        }
      } catch (error) {
        row(T, label, extra, undefined, (error as Error).message.split('\n')[0]);
      }
    }
    for (const list of [qs, ks, vs]) for (const t of list) t.dispose();
    group.destroy();
  }
  for (const t of [q, k, v]) t.dispose();
}

if (projected.length)
  tables.push({
    title: 'ring on P GPUs, projected from the loopback run (not measured)',
    headers: ['T', 'P', 'one GPU ms', 'projected ms', 'projected speedup', 'work per rank ms'],
    rows: projected,
    note: 'Σ over steps of the slowest rank’s event-timed work (its block calls and merges), i.e. P GPUs with the exchange fully hidden under compute',
  });
notes.push(
  nccl
    ? 'ring rows: RingGroup.nccl, one rank per GPU, one Node process; wall time until every rank finished'
    : 'ring rows: RingGroup.loopback, all ranks on one GPU one after another (speedup ≈ 1 by construction); see the projected table',
);
saveResults(out, makeResults('bench', { rows, tables, notes }));
console.log('T        label                                                  ms        speedup   TFLOP/s');
for (const r of rows)
  console.log(
    `${String(r.T).padEnd(9)}${r.label.padEnd(55)}${r.timing ? r.timing.ms.median.toFixed(2).padStart(9) : r.reason?.slice(0, 40)}` +
      `${r.speedupOverOneGpu !== undefined ? r.speedupOverOneGpu.toFixed(2).padStart(10) : ''}${r.tflops !== undefined ? r.tflops.toFixed(1).padStart(10) : ''}`,
  );
for (const p of projected)
  console.log(`projected T=${p[0]} P=${p[1]}: ${p[3]} ms, ${p[4]}x one GPU (per rank ${p[5]})`);
