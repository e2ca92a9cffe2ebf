/**
 * Timing one attnlab case the way GPU kernels should be timed (Triton's do_bench is the model):
 * the first call alone (it compiles kernels or builds cuDNN plans, reported as firstCallMs), a
 * warm-up, then many calls with CUDA events around each, inputs rotated over several copies when
 * one set would stay in L2, and the host wall time of each call kept beside the device time.
 */

import { attention } from '../api/attention.js';
import { cudaAvailable, getCudaContext, synchronize } from '../backends/cuda/runtime/context.js';
import { deviceMemoryInfo, memoryStats, resetPeakMemory } from '../backends/cuda/runtime/memory.js';
import { AttnlabError, OutOfMemoryError, UnsupportedError } from '../errors.js';
import type { Pass, ResultRow, RowStatus } from '../results/schema.js';
import { allocRaw, itemSize } from '../tensor/dtype.js';
import { randomNormal } from '../tensor/random.js';
import type { Device } from '../tensor/storage.js';
import { Tensor } from '../tensor/tensor.js';
import { maxErrorAgainstOracle } from './accuracy.js';
import { withDecodeBandwidth } from './bandwidth.js';
import { CudaEventTimer } from './cuda-timer.js';
import { gpuPowerProbe } from './gpu-power.js';
import { type PagedInputs, pagedFromDense } from './paged-inputs.js';
import { backwardCall, rowFlops } from './pass-call.js';
import { summarize } from './stats.js';
import type { BenchCase } from './sweep.js';

export interface MeasureOptions {
  /** The chart group the row belongs to. */
  sweep: string;
  /** Calls after the first and before timing. */
  warmup: number;
  /** Most timed calls; fewer when the calls are slow (see budgetMs), never fewer than minRepeats. */
  repeats: number;
  minRepeats: number;
  /** Timed-call budget per case in ms: a 200 ms call is timed 10 times, a 20 µs one `repeats` times. */
  budgetMs: number;
  /**
   * Back-to-back calls for about this long right before the timed ones, with no wait in between (GPU
   * only). The H200 lowers its clocks under its power cap within ~0.1 s of dense work: without this,
   * whichever case starts from an idle GPU times fast, and rows differ by their place in the run.
   */
  settleMs: number;
  seed: number;
  /** Check the first call's output against the float64 row oracle (accuracy.ts). */
  checkError: boolean;
  /** Dense matmul TFLOP/s for the ceiling column, or null. */
  ceilingTflops: number | null;
  /**
   * What to time instead of attention(q, k, v, { implementation, isCausal }), e.g. the TE module;
   * with it, `impl` and `label` name the row.
   */
  call?: (q: Tensor, k: Tensor, v: Tensor) => { output: Tensor; variant: string };
  impl?: string;
  label?: string;
  /** What to time (pass-call.ts); the error check runs on forward rows only. */
  pass: Pass;
}

export const DEFAULT_MEASURE: MeasureOptions = {
  sweep: 'bench',
  warmup: 5,
  repeats: 100,
  minRepeats: 10,
  budgetMs: 1000,
  settleMs: 300,
  seed: 0,
  checkError: true,
  ceilingTflops: null,
  pass: 'forward',
};

/** The settle phase stops after this many calls even when they are short (small shapes are host-bound). */
export const MAX_SETTLE_CALLS = 5000;

/** Calls of the settle phase: settleMs of calls of `perCallMs`, within [0, MAX_SETTLE_CALLS]. */
export function settleCalls(settleMs: number, perCallMs: number): number {
  return Math.min(MAX_SETTLE_CALLS, Math.ceil(settleMs / Math.max(perCallMs, 1e-3)));
}

/** Input copies are cycled until they span 2× the L2 cache (H200: 2 × 50 MiB), at most this many. */
const MAX_INPUT_COPIES = 64;

const SHORT_DTYPE: Record<string, string> = {
  bfloat16: 'bf16',
  float16: 'f16',
  float32: 'f32',
  float64: 'f64',
};

/** The series name of an attnlab row, e.g. 'attnlab flash bf16 causal'. */
export function attnlabLabel(
  c: Pick<BenchCase, 'impl' | 'dtype' | 'causal' | 'blockSize'>,
  pass: Pass = 'forward',
): string {
  const what = pass === 'forward' ? '' : ` ${pass}`;
  const paged = c.blockSize ? ` paged ${c.blockSize}` : '';
  return `attnlab ${c.impl} ${SHORT_DTYPE[c.dtype] ?? c.dtype}${paged}${c.causal ? ' causal' : ''}${what}`;
}

/** Where an implementation runs here: 'reference' always on the CPU, the others on CUDA when usable. */
export function deviceFor(impl: BenchCase['impl']): Device {
  if (impl === 'webgpu') return 'webgpu';
  return impl !== 'reference' && cudaAvailable().ok ? 'cuda' : 'cpu';
}

/** Measures one case; failures become rows with a status and a reason, never exceptions. */
export function measureAttnlabCase(c: BenchCase, options: Partial<MeasureOptions> = {}): ResultRow {
  const o = { ...DEFAULT_MEASURE, ...options };
  const flops = rowFlops({ ...c, pass: o.pass });
  const base = {
    sweep: o.sweep,
    source: 'attnlab' as const,
    impl: o.impl ?? c.impl,
    label: o.label ?? attnlabLabel(c, o.pass),
    ...shapeOf(c),
    ...(o.pass !== 'forward' ? { pass: o.pass } : {}),
    flops,
  };
  const device = deviceFor(c.impl);
  const copies: Tensor[][] = [];
  const gradients = o.pass !== 'forward' && !o.call ? backwardCall(c, o.pass) : null;
  try {
    // A backward set is [q, k, v, dO]: dO has the output's shape, (B,T,N,H).
    const host = gradients
      ? [...hostInputs(c, o.seed), seededInput([c.B, c.T, c.N, c.H], o.seed * 3 + 7, c.dtype)]
      : hostInputs(c, o.seed);
    // A paged case times [q, key pool, value pool] behind a shuffled table; the oracle checks it on the dense
    // inputs the pools hold. Only attention's forward takes one (the backward takes dense inputs only).
    if (c.blockSize && (gradients || o.call))
      throw new UnsupportedError(
        'bench',
        `a paged cache ${gradients ? `in a ${o.pass} pass` : 'with a custom call'}`,
      );
    const paged = c.blockSize ? pagedInputs(c, c.blockSize, o.seed) : null;
    const timed = paged ? [host[0], paged.keyPool, paged.valuePool, ...host.slice(3)] : host;
    const layout = paged ? { blockTable: paged.blockTable, keyValueSeqLengths: paged.lengths } : {};
    // What the pool holds before this case (long-lived workspaces, e.g. cuBLASLt's 32 MiB) is not
    // this case's memory: the peak is counted from here, inputs included.
    const baseline = device === 'cuda' ? memoryStats().currentBytes : 0;
    copies.push(device === 'cuda' ? timed.map((t) => t.to('cuda')) : timed);
    const call = (set: Tensor[]) =>
      gradients
        ? gradients.call(set)
        : o.call
          ? o.call(set[0], set[1], set[2])
          : attention(set[0], set[1], set[2], { implementation: c.impl, isCausal: c.causal, ...layout });

    if (device === 'cuda') resetPeakMemory();
    const t0 = performance.now();
    const first = call(copies[0]);
    if (device === 'cuda') synchronize();
    const firstCallMs = performance.now() - t0;
    const peakMemoryBytes = device === 'cuda' ? memoryStats().peakBytes - baseline : null;
    let maxError: number | null = null;
    let errorCheck: ResultRow['errorCheck'] = 'none';
    let nanOutput = false;
    if (o.checkError && !gradients) {
      const raw = (t: Tensor) => ({ data: t.data, dtype: t.dtype });
      const [q, k, v] = host.map(raw);
      const scale = 1 / Math.sqrt(c.H);
      const check = maxErrorAgainstOracle({ ...c, scale }, q, k, v, raw(first.output.toHost()));
      // JSON has no NaN: a NaN output keeps a null error and says so in the reason.
      maxError = Number.isNaN(check.maxError) ? null : check.maxError;
      if (maxError === null) nanOutput = true;
      errorCheck = check.full ? 'full' : 'sampled';
    }
    first.output.dispose();

    // Warm-up, timed with a sync after each call to size the timed loop.
    const warm: number[] = [];
    for (let i = 0; i < o.warmup; i++) {
      const w0 = performance.now();
      call(copies[0]).output.dispose();
      if (device === 'cuda') synchronize();
      warm.push(performance.now() - w0);
    }
    const perCall = warm.length > 0 ? Math.min(...warm) : firstCallMs;
    const repeats = Math.max(
      o.minRepeats,
      Math.min(o.repeats, Math.floor(o.budgetMs / Math.max(perCall, 1e-3))),
    );

    if (device === 'cpu') {
      const samples: number[] = [];
      for (let i = 0; i < repeats; i++) {
        const h0 = performance.now();
        call(copies[0]).output.dispose();
        samples.push(performance.now() - h0);
      }
      const ms = summarize(samples);
      return finish(
        base,
        c,
        o,
        { method: 'performance-now', ms, firstCallMs, warmup: o.warmup, inputCopies: 1 },
        {
          peakMemoryBytes,
          maxError,
          errorCheck,
          variant: first.variant,
          ...(nanOutput ? { reason: 'the output holds NaN' } : {}),
        },
      );
    }

    for (let i = 1; i < rotationCopies(timed); i++) copies.push(timed.map((t) => t.to('cuda')));
    const settle = settleCalls(o.settleMs, perCall);
    for (let i = 0; i < settle; i++) call(copies[i % copies.length]).output.dispose();
    const timer = new CudaEventTimer(repeats);
    const hostSamples: number[] = [];
    // NVML's counters from the first timed call's enqueue to after the last one finished (timer.read waits).
    const endPower = gpuPowerProbe()?.start();
    try {
      for (let i = 0; i < repeats; i++) {
        const set = copies[i % copies.length];
        let h = 0;
        const result = timer.time(() => {
          const h0 = performance.now();
          const r = call(set);
          h = performance.now() - h0;
          return r;
        });
        hostSamples.push(h);
        result.output.dispose();
      }
      const ms = summarize(timer.read());
      const power = endPower?.();
      const timing = {
        method: 'cuda-events' as const,
        ms,
        hostMs: summarize(hostSamples),
        firstCallMs,
        warmup: o.warmup,
        settleCalls: settle,
        inputCopies: copies.length,
        ...(power && { power }),
      };
      return finish(base, c, o, timing, {
        peakMemoryBytes,
        maxError,
        errorCheck,
        variant: first.variant,
        ...(nanOutput ? { reason: 'the output holds NaN' } : {}),
      });
    } finally {
      timer.dispose();
    }
  } catch (error) {
    return { ...base, ...failure(error, device) };
  } finally {
    gradients?.dispose();
    for (const set of copies) for (const t of set) if (t.device === 'cuda') t.dispose();
  }
}

/**
 * Inputs above this many elements tile a seeded random block of about this size along the
 * sequence: V8 draws and rounds ~3M bf16 normals a second, so a T=16384 problem (100M values) would
 * spend half a minute on inputs. The values do not change a kernel's time, and the error check
 * uses the tiled values themselves.
 */
export const RANDOM_BLOCK_ELEMENTS = 1 << 20;

let lastInputs: { key: string; tensors: Tensor[] } | undefined;

/** One (B, len, heads, H) input: seeded normals, tiled along the sequence beyond RANDOM_BLOCK_ELEMENTS. */
export function seededInput(
  shape: readonly [number, number, number, number],
  seed: number,
  dtype: BenchCase['dtype'],
): Tensor {
  const [B, len, heads, H] = shape;
  if (B * len * heads * H <= RANDOM_BLOCK_ELEMENTS) return randomNormal(shape, { seed, dtype });
  const rows = Math.max(1, Math.min(len, Math.floor(RANDOM_BLOCK_ELEMENTS / (heads * H))));
  const block = randomNormal([1, rows, heads, H], { seed, dtype }).data;
  const data = allocRaw(dtype, B * len * heads * H);
  // Same dtype, same element size: copy through byte views of both arrays.
  const bytes = new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  const tile = new Uint8Array(block.buffer, block.byteOffset, block.byteLength);
  for (let offset = 0; offset < bytes.length; offset += tile.length) {
    bytes.set(tile.subarray(0, Math.min(tile.length, bytes.length - offset)), offset);
  }
  return Tensor.fromRaw(data, shape, dtype);
}

/**
 * Seeded q (B,T,N,H), k and v (B,S,K,H) on the host. The last set is kept: sweeps run every
 * implementation of a shape back to back.
 */
export function hostInputs(c: BenchCase, seed: number): Tensor[] {
  const key = JSON.stringify([c.B, c.T, c.S, c.N, c.K, c.H, c.dtype, seed]);
  if (lastInputs?.key !== key) {
    lastInputs = undefined; // let the old set be collected before the new one is drawn
    const tensors = [0, 1, 2].map((i) => {
      const [len, heads] = i === 0 ? [c.T, c.N] : [c.S, c.K];
      return seededInput([c.B, len, heads, c.H], seed * 3 + i, c.dtype);
    });
    lastInputs = { key, tensors };
  }
  return lastInputs.tensors;
}

let lastPaged: { key: string; inputs: PagedInputs } | undefined;

/**
 * hostInputs' key and value as pools behind a shuffled table (pagedFromDense). The last set is kept, as
 * hostInputs keeps its own: a sweep runs every implementation of a block size back to back (expandSweep), and at
 * 1M cached tokens (B=64 S=16k K=1) each set is 512 MiB of host pools.
 */
function pagedInputs(c: BenchCase, blockSize: number, seed: number): PagedInputs {
  const [, key, value] = hostInputs(c, seed);
  const id = JSON.stringify([c.B, c.T, c.S, c.N, c.K, c.H, c.dtype, seed, blockSize]);
  if (lastPaged?.key !== id) {
    lastPaged = undefined; // let the old pools be collected before the new ones are built
    lastPaged = { key: id, inputs: pagedFromDense(key, value, blockSize, seed) };
  }
  return lastPaged.inputs;
}

/** How many input sets to cycle so they span 2× L2, bounded by MAX_INPUT_COPIES and a quarter of free memory. */
export function rotationCopies(host: readonly Tensor[]): number {
  const bytes = host.reduce((sum, t) => sum + t.size * itemSize(t.dtype), 0);
  const l2 = getCudaContext().properties.l2CacheBytes;
  const byMemory = Math.floor(deviceMemoryInfo().free / 4 / Math.max(bytes, 1));
  return Math.max(1, Math.min(MAX_INPUT_COPIES, Math.ceil((2 * l2) / Math.max(bytes, 1)), byMemory));
}

export function shapeOf(c: BenchCase) {
  const paged = c.blockSize ? { blockSize: c.blockSize } : {};
  return { B: c.B, T: c.T, S: c.S, N: c.N, K: c.K, H: c.H, dtype: c.dtype, causal: c.causal, ...paged };
}

export function finish(
  base: Omit<ResultRow, 'status'>,
  c: BenchCase,
  o: MeasureOptions,
  timing: NonNullable<ResultRow['timing']>,
  extra: Pick<ResultRow, 'peakMemoryBytes' | 'maxError' | 'errorCheck' | 'variant' | 'reason'>,
): ResultRow {
  const tflops = rowFlops({ ...c, pass: o.pass }) / (timing.ms.median * 1e-3) / 1e12;
  const row: ResultRow = { ...base, status: 'ok', ...extra, timing, tflops };
  if (o.ceilingTflops) row.ceilingPercent = (100 * tflops) / o.ceilingTflops;
  return withDecodeBandwidth(row, deviceFor(c.impl) === 'cuda');
}

/** The status and reason of a case that did not run; anything not thrown on purpose is 'unexpected' (a bug). */
export function failure(error: unknown, device: Device): { status: RowStatus; reason: string } {
  if (error instanceof OutOfMemoryError) return { status: 'out-of-memory', reason: error.message };
  if (error instanceof UnsupportedError) {
    // A cuda backend asked for on cpu inputs: say why the inputs were not on the GPU.
    const cuda = cudaAvailable();
    const onCpu = device === 'cpu' && !cuda.ok && error.reason.includes('runs on cuda');
    return {
      status: 'unsupported',
      reason: `${error.message}${onCpu ? ` (no CUDA here: ${cuda.reason})` : ''}`,
    };
  }
  if (error instanceof AttnlabError) return { status: 'error', reason: `${error.name}: ${error.message}` };
  const text = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
  return { status: 'error', reason: `unexpected ${text}` };
}
