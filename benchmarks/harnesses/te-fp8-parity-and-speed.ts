/**
 * The measurements of issue 6 on a Hopper GPU, in one process, written as JSON:
 *   1. the module's bf16 output against dotProductAttention's (cuDNN) for each mask type;
 *   2. FP8 output error against bf16 over the codelab's sweep (B=4, N=8, H=64, T=128…2048, causal
 *      as TE's default) and at H=128, after two calibration calls (delayed scaling starts at scale 1);
 *   3. throughput at B=4, T=S=8192, N=16, H=128: the module's FP8 step (quantise, cuDNN FP8 graph,
 *      dequantise, device-side scale update) against attnlab's bf16 cuDNN path, the FP8 step's parts,
 *      and the step in 1, 2 and 4 pipelined batch chunks.
 * Timing: CUDA events around each call after warm-up (events.ts), median of `ITERATIONS`. Each
 * measurement runs in a child process of its own.
 *
 * Run: node --import tsx benchmarks/harnesses/te-fp8-parity-and-speed.ts [out.json]
 */

import { spawnSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { attention } from '../../src/api/attention.js';
import { validateAttention } from '../../src/api/validate.js';
import { cudnnEnvironment } from '../../src/backends/cuda/cudnn/backend.js';
import { fp8GraphFeatures, SCALAR_BLOCK_BYTES, SCALAR_SLOTS } from '../../src/backends/cuda/fp8/graph.js';
import { launchDequantise, launchQuantise3 } from '../../src/backends/cuda/fp8/kernels.js';
import { pipelineChunks } from '../../src/backends/cuda/fp8/pipeline.js';
import { executeFp8Plan, fp8Plan } from '../../src/backends/cuda/fp8/plan.js';
import { runCudaFp8 } from '../../src/backends/cuda/fp8/run.js';
import { DeviceDelayedState } from '../../src/backends/cuda/fp8/state.js';
import { getCudaContext, synchronize } from '../../src/backends/cuda/runtime/context.js';
import { allocDevice, copyToDevice } from '../../src/backends/cuda/runtime/memory.js';
import { type AttentionProblem, attentionFlops } from '../../src/backends/problem.js';
import { timeOnStream } from '../../src/bench/cuda-timer.js';
import { settleCalls } from '../../src/bench/measure.js';
import { summarize } from '../../src/bench/stats.js';
import { autocast } from '../../src/te/autocast.js';
import { Fp8State } from '../../src/te/fp8-state.js';
import { DotProductAttention, SequenceDescriptor } from '../../src/te/module.js';
import { MASK_TYPES } from '../../src/te/options.js';
import { absMax } from '../../src/te/quantise.js';
import { DelayedScaling } from '../../src/te/recipe.js';
import { randomNormal } from '../../src/tensor/random.js';
import { Tensor } from '../../src/tensor/tensor.js';

const ITERATIONS = 20;
/** Alternating rounds of bf16 and FP8 timing, each after SETTLE_MS of its own calls (see throughput). */
const ROUNDS = 3;
const SETTLE_MS = 300;

/**
 * A bf16 (B,T,heads,H) tensor (on the GPU unless `device` says 'cpu'). Up to T = 2048 every value
 * is drawn; longer ones (the throughput shape, where only time is read) tile a 1024-row random block,
 * which makes 200 M host draws 3 M.
 */
function input(shape: number[], seed: number, device: 'cpu' | 'cuda' = 'cuda'): Tensor {
  const [B, T, heads, H] = shape;
  const rows = T <= 2048 ? T : 1024;
  const tile = randomNormal([1, rows, heads, H], { seed, dtype: 'bfloat16' }).data as Uint16Array;
  const data = new Uint16Array(B * T * heads * H);
  for (let offset = 0; offset < data.length; offset += tile.length)
    data.set(tile.subarray(0, data.length - offset), offset);
  const tensor = Tensor.fromRaw(data, shape, 'bfloat16');
  return device === 'cuda' ? tensor.to('cuda') : tensor;
}

function errors(a: Float64Array, b: Float64Array) {
  let max = 0;
  let sum = 0;
  let squares = 0;
  let reference = 0;
  for (let i = 0; i < a.length; i++) {
    const e = Math.abs(a[i] - b[i]);
    max = Math.max(max, e);
    sum += e;
    squares += e * e;
    reference += b[i] * b[i];
  }
  return {
    maxAbs: max,
    meanAbs: sum / a.length,
    relativeRms: Math.sqrt(squares / reference),
    maxAbsBf16: absMax(b),
  };
}

function bf16Parity() {
  const [B, T, N, K, H] = [4, 1024, 8, 2, 64];
  const [q, k, v] = [input([B, T, N, H], 1), input([B, T, K, H], 2), input([B, T, K, H], 3)];
  const lengths = [1024, 700, 513, 64];
  return MASK_TYPES.map((mask) => {
    const padding = mask.startsWith('padding');
    const attn = new DotProductAttention({
      headDim: H,
      numAttentionHeads: N,
      numGqaGroups: K,
      attnMaskType: mask,
    });
    const r = attn.apply(q, k, v, {
      sequenceDescriptor: padding ? SequenceDescriptor.fromSeqLens(lengths) : undefined,
    });
    const expected = attention(q, k, v, {
      implementation: 'cudnn',
      isCausal: mask.includes('causal'),
      causalAlignment: mask.endsWith('bottom_right') ? 'bottom_right' : 'top_left',
      querySeqLengths: padding ? lengths : undefined,
      keyValueSeqLengths: padding ? lengths : undefined,
    });
    const e = errors(r.output.toFloat64Array(), expected.output.toFloat64Array());
    return { mask, shape: { B, T, N, K, H }, backend: r.backend, maxAbsDiff: e.maxAbs, variant: r.variant };
  });
}

function fp8Error(T: number, H: number, N: number, causal: boolean, device: 'cpu' | 'cuda' = 'cuda') {
  const B = 4;
  const [q, k, v] = [0, 1, 2].map((i) => input([B, T, N, H], 100 * T + H + i, device));
  const config = {
    headDim: H,
    numAttentionHeads: N,
    attnMaskType: causal ? ('causal' as const) : ('no_mask' as const),
  };
  const bf16 = new DotProductAttention(config).forward(q, k, v).toFloat64Array();
  const attn = new DotProductAttention(config);
  const scope = autocast({ recipe: new DelayedScaling({ fp8Format: 'HYBRID', amaxHistoryLen: 1024 }) });
  const first = attn.apply(q, k, v, { autocast: scope });
  const firstError = errors(first.output.toFloat64Array(), bf16);
  attn.apply(q, k, v, { autocast: scope });
  const r = attn.apply(q, k, v, { autocast: scope });
  return {
    shape: { B, T, N, H, causal },
    firstCall: firstError,
    calibrated: errors(r.output.toFloat64Array(), bf16),
    scales: r.fp8?.scales,
    amax: r.fp8?.amax,
    variant: r.variant,
  };
}

/** One FP8 step (delayed scaling, DelayedScaling's defaults) in `chunks` batch chunks, as a call to time. */
function delayedStep(problem: AttentionProblem, state: DeviceDelayedState, chunks: number): () => void {
  return () =>
    runCudaFp8({
      problem,
      dtype8: 'float8_e4m3fn',
      scaling: { kind: 'delayed', state, margin: 0, mostRecent: false },
      keepFp8Output: false,
      chunks,
    }).output.dispose();
}

function throughput(causal: boolean) {
  const [B, T, N, H] = [4, 8192, 16, 128];
  const [q, k, v] = [0, 1, 2].map((i) => input([B, T, N, H], 7 + i));
  const flops = attentionFlops({ B, N, T, S: T, H, causal });
  const tflops = (ms: number) => flops / (ms * 1e-3) / 1e12;
  const attn = new DotProductAttention({
    headDim: H,
    numAttentionHeads: N,
    attnMaskType: causal ? 'causal' : 'no_mask',
  });
  const scope = autocast({ recipe: new DelayedScaling() });
  const bf16Call = () => attention(q, k, v, { implementation: 'cudnn', isCausal: causal }).output.dispose();
  const fp8Call = () => attn.apply(q, k, v, { autocast: scope }).output.dispose();
  // The H200 lowers its clocks under its power cap within ~0.1 s of dense work, so a path timed
  // from an idle GPU looks faster, and one timed right after the other inherits its clocks. Each
  // path is therefore timed in its own sustained state: SETTLE_MS of back-to-back calls, then the
  // timed calls, in alternating rounds (as attnlab bench's --settle-ms does for its rows).
  const perCall = (fn: () => void) => timeOnStream(fn, { iterations: 3, warmup: 3 }).median;
  const settled = (fn: () => void, ms: number) => {
    for (let i = 0; i < settleCalls(SETTLE_MS, ms); i++) fn();
    return timeOnStream(fn, { iterations: ITERATIONS, warmup: 0 }).times;
  };
  const [bf16PerCall, fp8PerCall] = [perCall(bf16Call), perCall(fp8Call)];
  const bf16Times: number[] = [];
  const fp8Times: number[] = [];
  for (let round = 0; round < ROUNDS; round++) {
    bf16Times.push(...settled(bf16Call, bf16PerCall));
    fp8Times.push(...settled(fp8Call, fp8PerCall));
  }
  const bf16 = summarize(bf16Times);
  const module = summarize(fp8Times);
  // Host wall time of back-to-back calls, waited for at the end: what a caller looping over layers sees.
  synchronize();
  const wallStart = performance.now();
  for (let i = 0; i < ITERATIONS; i++) attn.apply(q, k, v, { autocast: scope }).output.dispose();
  synchronize();
  const wallMs = (performance.now() - wallStart) / ITERATIONS;

  // The step's parts, with the calibrated scales of the module.
  const problem = validateAttention(q, k, v, { isCausal: causal });
  const plan = fp8Plan(fp8GraphFeatures(problem));
  const scales = attn.fp8State.delayedScales(new DelayedScaling());
  const values = new Float32Array(SCALAR_BLOCK_BYTES / 4);
  for (const [slot, value] of [
    [SCALAR_SLOTS.scaleQ, scales.q],
    [SCALAR_SLOTS.scaleK, scales.k],
    [SCALAR_SLOTS.scaleV, scales.v],
    [SCALAR_SLOTS.scaleS, scales.s],
    [SCALAR_SLOTS.scaleO, scales.o],
    [SCALAR_SLOTS.descaleQ, 1 / scales.q],
    [SCALAR_SLOTS.descaleK, 1 / scales.k],
    [SCALAR_SLOTS.descaleV, 1 / scales.v],
    [SCALAR_SLOTS.descaleS, 1 / scales.s],
  ])
    values[slot * 4] = value;
  const block = copyToDevice(new Uint8Array(values.buffer));
  const n = B * T * N * H;
  const [q8, k8, v8, o8, out] = [n, n, n, n, 2 * n].map((bytes) => allocDevice(bytes));
  const ptrs = [q.buffer.ptr, k.buffer.ptr, v.buffer.ptr] as const;
  const quantise = timeOnStream(
    () => launchQuantise3(ptrs, [q8.ptr, k8.ptr, v8.ptr], n, n, block.ptr, false),
    {
      iterations: ITERATIONS,
    },
  );
  const pointers = { q8: q8.ptr, k8: k8.ptr, v8: v8.ptr, o8: o8.ptr, scalarBlock: block.ptr };
  const graph = timeOnStream(() => executeFp8Plan(plan, pointers, problem.scale), { iterations: ITERATIONS });
  const dequantise = timeOnStream(() => launchDequantise(o8.ptr, out.ptr, n, block.ptr), {
    iterations: ITERATIONS,
  });
  // The same three parts enqueued back to back, and the module alone back to back (not alternating
  // with bf16): where the module's time goes beyond the sum of its parts.
  const chained = timeOnStream(
    () => {
      launchQuantise3(ptrs, [q8.ptr, k8.ptr, v8.ptr], n, n, block.ptr, false);
      executeFp8Plan(plan, pointers, problem.scale);
      launchDequantise(o8.ptr, out.ptr, n, block.ptr);
    },
    { iterations: ITERATIONS },
  );
  const moduleAlone = timeOnStream(fp8Call, { iterations: ITERATIONS });
  // The whole step (delayed scaling on the module's device state) in 1, 2 and 4 batch chunks, each
  // settled, in alternating rounds: what the pipelining (pipelineChunks) buys at this shape.
  const deviceState = attn.fp8State.mirrorFor(new DelayedScaling(), DeviceDelayedState.upload);
  const stepIn = (chunks: number) => delayedStep(problem, deviceState, chunks);
  const chunkOptions = [1, 2, 4];
  const chunkTimes = chunkOptions.map((): number[] => []);
  for (let round = 0; round < ROUNDS; round++)
    for (const [i, chunks] of chunkOptions.entries())
      chunkTimes[i].push(...settled(stepIn(chunks), module.median));
  for (const buffer of [block, q8, k8, v8, o8, out]) buffer.release();
  for (const t of [q, k, v]) t.dispose();
  return {
    shape: { B, T, S: T, N, H, causal },
    bf16Cudnn: { medianMs: bf16.median, tflops: tflops(bf16.median), p10Ms: bf16.p10, p90Ms: bf16.p90 },
    fp8Module: {
      medianMs: module.median,
      tflops: tflops(module.median),
      p10Ms: module.p10,
      p90Ms: module.p90,
      wallMs,
    },
    speedup: bf16.median / module.median,
    fp8Parts: {
      quantiseQkvMs: quantise.median,
      cudnnFp8GraphMs: graph.median,
      cudnnFp8GraphTflops: tflops(graph.median),
      dequantiseMs: dequantise.median,
      chainedMs: chained.median,
      moduleBackToBackMs: moduleAlone.median,
    },
    pipelining: {
      moduleChunks: pipelineChunks(problem),
      stepMsByChunks: Object.fromEntries(chunkOptions.map((c, i) => [c, summarize(chunkTimes[i]).median])),
    },
    fp8Variant: plan.variant,
  };
}

/**
 * The FP8 step (delayed scaling) in 1, 2 and 4 pipelined batch chunks at B=4, N=16, H=128 for
 * T = 2048, 4096, 8192: where pipelining starts to pay (pipelineChunks' threshold is 2^25 query
 * elements, T = 4096 here). Each setting settled, in alternating rounds.
 */
function pipelining(causal: boolean) {
  const [B, N, H] = [4, 16, 128];
  return [2048, 4096, 8192].map((T) => {
    const [q, k, v] = [0, 1, 2].map((i) => input([B, T, N, H], 20 + i));
    const problem = validateAttention(q, k, v, { isCausal: causal });
    const state = new Fp8State().mirrorFor(new DelayedScaling(), DeviceDelayedState.upload);
    const stepIn = (chunks: number) => delayedStep(problem, state, chunks);
    const chunkOptions = [1, 2, 4];
    const perCall = timeOnStream(stepIn(1), { iterations: 3, warmup: 3 }).median;
    for (const chunks of chunkOptions) stepIn(chunks)(); // plans built before timing
    const times = chunkOptions.map((): number[] => []);
    for (let round = 0; round < ROUNDS; round++)
      for (const [i, chunks] of chunkOptions.entries()) {
        for (let c = 0; c < settleCalls(SETTLE_MS / 3, perCall); c++) stepIn(chunks)();
        times[i].push(...timeOnStream(stepIn(chunks), { iterations: ITERATIONS, warmup: 0 }).times);
      }
    for (const t of [q, k, v]) t.dispose();
    state.release();
    return {
      shape: { B, T, S: T, N, H, causal },
      chosenChunks: pipelineChunks(problem),
      stepMsByChunks: Object.fromEntries(chunkOptions.map((c, i) => [c, summarize(times[i]).median])),
    };
  });
}

/** One measurement, run in a process of its own (see runFp8Bench). */
type Section =
  | { readonly kind: 'parity' }
  | { readonly kind: 'error'; readonly T: number; readonly H: number; readonly causal: boolean }
  | { readonly kind: 'throughput'; readonly causal: boolean }
  | { readonly kind: 'pipelining'; readonly causal: boolean };

const SECTIONS: readonly Section[] = [
  { kind: 'parity' },
  ...[128, 256, 512, 1024, 2048].map((T) => ({ kind: 'error' as const, T, H: 64, causal: true })),
  ...[512, 2048].map((T) => ({ kind: 'error' as const, T, H: 128, causal: true })),
  { kind: 'error', T: 2048, H: 64, causal: false },
  { kind: 'throughput', causal: false },
  { kind: 'throughput', causal: true },
  { kind: 'pipelining', causal: false },
  { kind: 'pipelining', causal: true },
];

function measureSection(section: Section): unknown {
  if (section.kind === 'parity') return bf16Parity();
  if (section.kind === 'error') return fp8Error(section.T, section.H, 8, section.causal);
  if (section.kind === 'pipelining') return pipelining(section.causal);
  return throughput(section.causal);
}

const RESULT_PREFIX = 'SECTION-RESULT ';

/**
 * Every section in a child process of its own, so that a crash inside a native library (one was
 * seen in a long in-process run on the H200) loses that section only; each is logged as it ends.
 */
export function runFp8Bench() {
  const started = new Date().toISOString();
  const results = SECTIONS.map((section) => {
    const child = spawnSync(
      process.execPath,
      [...process.execArgv, fileURLToPath(import.meta.url), '--section', JSON.stringify(section)],
      {
        encoding: 'utf8',
        maxBuffer: 64 << 20,
      },
    );
    const line = child.stdout.split('\n').find((l) => l.startsWith(RESULT_PREFIX));
    const value = line
      ? JSON.parse(line.slice(RESULT_PREFIX.length))
      : { error: `exit ${child.status} signal ${child.signal}`, stderr: child.stderr.slice(-2000) };
    console.log(`${JSON.stringify(section)}: ${JSON.stringify(value)}`);
    return { section, value };
  });
  const env = cudnnEnvironment();
  return {
    started,
    device: getCudaContext().properties.name,
    cudnn: env.ok ? env.env.version : env.reason,
    command: 'node --import tsx benchmarks/harnesses/te-fp8-parity-and-speed.ts',
    // pack-device.sh records the commit for runs on a machine without .git (ATTNLAB_COMMIT).
    commit: process.env.ATTNLAB_COMMIT ?? null,
    timing: `CUDA events around each call; throughput: ${ROUNDS} alternating rounds of bf16 and FP8, each ${SETTLE_MS} ms of back-to-back calls then ${ITERATIONS} timed ones, median of all; parts: ${ITERATIONS} calls each after 3 warm-up calls, median`,
    bf16Parity: results.filter((r) => r.section.kind === 'parity').map((r) => r.value),
    fp8ErrorSweep: results.filter((r) => r.section.kind === 'error').map((r) => r.value),
    throughput: results.filter((r) => r.section.kind === 'throughput').map((r) => r.value) as (
      | ReturnType<typeof throughput>
      | { error: string }
    )[],
    pipelining: results.filter((r) => r.section.kind === 'pipelining').map((r) => r.value),
  };
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  if (process.argv[2] === '--section') {
    let value: unknown;
    try {
      value = measureSection(JSON.parse(process.argv[3]) as Section);
    } catch (error) {
      value = { error: error instanceof Error ? `${error.name}: ${error.message}` : String(error) };
    }
    console.log(`${RESULT_PREFIX}${JSON.stringify(value)}`);
    process.exit(0);
  }
  if (process.argv[2] === '--cpu-emulation') {
    // The error sweep with the CPU emulation of the FP8 step (same quantisation and scales, float64
    // attention, P not quantised): what input and output rounding alone cost, without a GPU.
    const sweep = SECTIONS.filter((s) => s.kind === 'error').map((s) => {
      const value = fp8Error(s.T, s.H, 8, s.causal, 'cpu');
      console.log(`${JSON.stringify(s)}: ${JSON.stringify(value)}`);
      return value;
    });
    const out = process.argv[3] ?? 'te-fp8-cpu-emulation.json';
    const command = 'node --import tsx benchmarks/harnesses/te-fp8-parity-and-speed.ts --cpu-emulation';
    writeFileSync(
      out,
      `${JSON.stringify({ started: new Date().toISOString(), command, fp8ErrorSweep: sweep }, null, 2)}\n`,
    );
    process.exit(0);
  }
  const result = runFp8Bench();
  const out = process.argv[2] ?? 'te-fp8.json';
  writeFileSync(out, `${JSON.stringify(result, null, 2)}\n`);
  for (const t of result.throughput) {
    if ('error' in t) continue;
    console.log(
      `B=4 T=8192 N=16 H=128 causal=${t.shape.causal}: bf16 cuDNN ${t.bf16Cudnn.medianMs.toFixed(3)} ms ` +
        `(${t.bf16Cudnn.tflops.toFixed(0)} TFLOP/s), FP8 module ${t.fp8Module.medianMs.toFixed(3)} ms ` +
        `(${t.fp8Module.tflops.toFixed(0)}), speed-up ${t.speedup.toFixed(2)}×; FP8 graph alone ` +
        `${t.fp8Parts.cudnnFp8GraphMs.toFixed(3)} ms, quantise ${t.fp8Parts.quantiseQkvMs.toFixed(3)}, ` +
        `dequantise ${t.fp8Parts.dequantiseMs.toFixed(3)}; parts chained ${t.fp8Parts.chainedMs.toFixed(3)}, module back to back ${t.fp8Parts.moduleBackToBackMs.toFixed(3)}; ` +
        `module in ${t.pipelining.moduleChunks} chunks; step by chunks ${JSON.stringify(t.pipelining.stepMsByChunks)}`,
    );
  }
  console.log(`wrote ${out}`);
}
