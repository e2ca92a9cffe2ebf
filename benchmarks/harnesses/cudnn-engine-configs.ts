/**
 * Experiment: every engine config cuDNN's heuristics offer (modes A, B and FALLBACK) for attnlab's
 * bf16 graphs and its FP8 graph at one shape, each finalized and timed, to learn whether the first
 * config (what attnlab and cudnn-frontend take) is the fastest. Also times the default bf16 plan in
 * several rounds, to show how much one measurement drifts within a process.
 *
 * Run on a GPU: node --import tsx benchmarks/harnesses/cudnn-engine-configs.ts [B T N H]
 * Prints one line per plan; the numbers go into benchmarks/results by hand with the command.
 */
import { attention } from '../../src/api/attention.js';
import { validateAttention } from '../../src/api/validate.js';
import { cudnnEnvironment } from '../../src/backends/cuda/cudnn/backend.js';
import { executePlan } from '../../src/backends/cuda/cudnn/execute.js';
import { describeSdpa, type GraphKind } from '../../src/backends/cuda/cudnn/features.js';
import { destroyAll, materializeGraph } from '../../src/backends/cuda/cudnn/materialize.js';
import type { CachedPlan } from '../../src/backends/cuda/cudnn/plan.js';
import {
  type HeuristicModeName,
  kernelNameFromJson,
  planCandidates,
  serializePlan,
} from '../../src/backends/cuda/cudnn/plan.js';
import { buildSdpaGraph } from '../../src/backends/cuda/cudnn/sdpa-graph.js';
import { cudnnHandle } from '../../src/backends/cuda/ffi/cudnn.js';
import { buildFp8Graph, type Fp8Layout, fp8GraphFeatures } from '../../src/backends/cuda/fp8/graph.js';
import { launchQuantise3 } from '../../src/backends/cuda/fp8/kernels.js';
import { executeFp8Plan, fp8Plan } from '../../src/backends/cuda/fp8/plan.js';
import { allocDevice } from '../../src/backends/cuda/runtime/memory.js';
import { type AttentionProblem, problemFlops } from '../../src/backends/problem.js';
import { timeOnStream } from '../../src/bench/cuda-timer.js';
import { seededInput } from '../../src/bench/measure.js';
import type { Tensor } from '../../src/tensor/tensor.js';
import { calibratedScalarBlock } from './fp8-scalars.js';

// Sections: 'engines' (every config of every graph), 'fp8-layouts' (the FP8 graph's configs over
// the memory layouts of Q8/K8/V8/O8), or both by default.
const section = process.argv[2] && Number.isNaN(Number(process.argv[2])) ? process.argv[2] : 'all';
const args = process.argv.slice(section === 'all' ? 2 : 3).map(Number);
const [B, T, N, H] = args.length === 4 ? args : [4, 8192, 16, 128];
const MODES = ['A', 'B', 'FALLBACK'] as const;
/** A config whose single call takes longer than this is reported but not timed further. */
const SLOW_MS = 100;

const env = cudnnEnvironment();
if (!env.ok) throw new Error(env.reason);
const handle = cudnnHandle();
const q = seededInput([B, T, N, H], 1, 'bfloat16').to('cuda');
const k = seededInput([B, T, N, H], 2, 'bfloat16').to('cuda');
const v = seededInput([B, T, N, H], 3, 'bfloat16').to('cuda');

function line(
  what: string,
  source: string,
  engine: number,
  ms: number | null,
  p: AttentionProblem,
  kernel: string,
) {
  const tflops = ms ? problemFlops(p) / (ms * 1e-3) / 1e12 : null;
  console.log(
    `${what.padEnd(24)} ${source.padEnd(11)} engine ${String(engine).padStart(3)}  ${ms === null ? '   (slow)' : ms.toFixed(3).padStart(7)} ms  ${tflops === null ? '' : tflops.toFixed(0).padStart(5)} TFLOP/s  ${kernel}`,
  );
}

function bf16Engines(causal: boolean, graph: GraphKind) {
  const p = validateAttention(q, k, v, { isCausal: causal });
  const d = describeSdpa(p, env.ok ? env.env : (undefined as never), { graph });
  if (!d.ok) {
    console.log(`bf16 ${graph} causal=${causal}: ${d.reason}`);
    return;
  }
  const spec = buildSdpaGraph(d.features);
  const materialized = materializeGraph(spec, handle);
  const output = allocDevice(B * T * N * H * 2);
  const failures: string[] = [];
  try {
    for (const candidate of planCandidates(materialized.graph, handle, failures, MODES)) {
      const entry: CachedPlan = {
        key: d.key,
        spec,
        plan: candidate.plan,
        variant: '',
        source: 'built',
        setupMs: 0,
        graphDescriptors: [],
      };
      const run = () =>
        executePlan(
          entry,
          handle,
          { query: q.buffer.ptr, key: k.buffer.ptr, value: v.buffer.ptr, output: output.ptr },
          p.scale,
        );
      const once = timeOnStream(run, { iterations: 1, warmup: 1 }).median;
      const ms = once > SLOW_MS ? null : timeOnStream(run, { iterations: 20, warmup: 3 }).median;
      const kernel = kernelNameFromJson(serializePlan(candidate.plan.plan)) ?? '?';
      line(`bf16 ${graph}${causal ? ' causal' : ''}`, candidate.source, candidate.plan.engine, ms, p, kernel);
    }
  } finally {
    destroyAll(materialized.descriptors);
    output.release();
  }
  if (failures.length) console.log(`  not finalized: ${failures.join(' | ').slice(0, 600)}`);
}

function fp8Engines(
  causal: boolean,
  layout: Fp8Layout = 'bshd',
  output: 'fp8_e4m3' | 'bfloat16' = 'fp8_e4m3',
  modes: readonly HeuristicModeName[] = MODES,
) {
  const p = validateAttention(q, k, v, { isCausal: causal });
  const features = fp8GraphFeatures(p);
  const reference = fp8Plan(features); // the default plan, for its roles and scalars
  const n = B * T * N * H;
  const block = calibratedScalarBlock();
  const [q8, k8, v8, o8] = [n, n, n, output === 'bfloat16' ? 2 * n : n].map((bytes) => allocDevice(bytes));
  launchQuantise3(
    [q.buffer.ptr, k.buffer.ptr, v.buffer.ptr],
    [q8.ptr, k8.ptr, v8.ptr],
    n,
    n,
    block.ptr,
    false,
  );
  const pointers = { q8: q8.ptr, k8: k8.ptr, v8: v8.ptr, o8: o8.ptr, scalarBlock: block.ptr };
  const graph = buildFp8Graph(features, { layout, output });
  const materialized = materializeGraph(graph.spec, handle);
  const failures: string[] = [];
  try {
    for (const candidate of planCandidates(materialized.graph, handle, failures, modes)) {
      const entry = { ...reference, plan: candidate.plan };
      const run = () => executeFp8Plan(entry, pointers, p.scale);
      const once = timeOnStream(run, { iterations: 1, warmup: 1 }).median;
      const ms = once > SLOW_MS ? null : timeOnStream(run, { iterations: 20, warmup: 3 }).median;
      const kernel = kernelNameFromJson(serializePlan(candidate.plan.plan)) ?? '?';
      line(
        `fp8 ${layout}${output === 'bfloat16' ? ' O bf16' : ''}${causal ? ' causal' : ''}`,
        candidate.source,
        candidate.plan.engine,
        ms,
        p,
        kernel,
      );
    }
  } finally {
    destroyAll(materialized.descriptors);
    for (const b of [block, q8, k8, v8, o8]) b.release();
  }
  if (failures.length) console.log(`  not finalized: ${failures.join(' | ').slice(0, 600)}`);
}

function drift(causal: boolean) {
  const p = validateAttention(q, k, v, { isCausal: causal });
  const rounds: string[] = [];
  for (let round = 0; round < 6; round++) {
    const { median } = timeOnStream(
      () => attention(q, k, v, { implementation: 'cudnn', isCausal: causal }).output.dispose(),
      { iterations: 30, warmup: round === 0 ? 3 : 0 },
    );
    rounds.push(`${median.toFixed(3)} ms (${(problemFlops(p) / (median * 1e-3) / 1e12).toFixed(0)})`);
  }
  console.log(`drift bf16 default plan causal=${causal}: ${rounds.join(', ')}`);
}

console.log(`cuDNN ${env.env.version}, B=${B} T=${T} N=${N} H=${H} bf16`);
if (section === 'all' || section === 'engines') {
  drift(false);
  drift(true);
  for (const causal of [false, true]) {
    for (const graph of ['unified', 'composite'] as const) bf16Engines(causal, graph);
    fp8Engines(causal);
  }
  drift(false);
}
if (section === 'all' || section === 'fp8-layouts') {
  for (const causal of [false, true])
    for (const layout of ['bshd', 'bhsd'] as const) fp8Engines(causal, layout, 'fp8_e4m3', ['A']);
}
// cudnn-frontend says bf16 output from the FP8 graph is Blackwell-only; ask this GPU's cuDNN.
if (section === 'all' || section === 'fp8-output') {
  for (const causal of [false, true]) fp8Engines(causal, 'bshd', 'bfloat16', ['A', 'B', 'FALLBACK']);
}
for (const t of [q, k, v] as Tensor[]) t.dispose();
