/**
 * Experiment: the knobs of the engine cuDNN's heuristics pick for attnlab's FP8 and bf16 graphs
 * (B=4, T=8192, N=16, H=128 by default), and a sweep of every value of each knob with a range,
 * each finalized and timed. Heuristics return two kernel configs of engine 2 for FP8 (knob 32 at
 * 1015 TFLOP/s, knob 7 at 883): are there others, and is one faster?
 *
 * The knob enums are not part of attnlab's constants (cudnn-constants.ts), so this script reads
 * them from the cuDNN header of the machine it runs on (CUDNN_HEADER or the usual places).
 *
 * Run on a GPU: node --import tsx bench/experiments/cudnn-knobs.ts [fp8|bf16|both] [B T N H]
 */
import { existsSync, readFileSync } from 'node:fs';
import { validateAttention } from '../../src/api/validate.js';
import { cudnnEnvironment } from '../../src/backends/cuda/cudnn/backend.js';
import { executePlan } from '../../src/backends/cuda/cudnn/execute.js';
import { describeSdpa } from '../../src/backends/cuda/cudnn/features.js';
import { destroyAll, materializeGraph } from '../../src/backends/cuda/cudnn/materialize.js';
import type { CachedPlan } from '../../src/backends/cuda/cudnn/plan.js';
import {
  type ExecutionPlan,
  kernelNameFromJson,
  planCandidates,
  serializePlan,
} from '../../src/backends/cuda/cudnn/plan.js';
import { buildSdpaGraph } from '../../src/backends/cuda/cudnn/sdpa-graph.js';
import {
  countDescriptors,
  createDescriptor,
  cudnnHandle,
  destroyDescriptor,
  finalize,
  getDescriptors,
  getInt64,
  loadCudnn,
  set,
  setAttribute,
} from '../../src/backends/cuda/ffi/cudnn.js';
import { ATTR, ATTR_TYPE, DESCRIPTOR } from '../../src/backends/cuda/ffi/cudnn-constants.js';
import { buildFp8Graph, fp8GraphFeatures } from '../../src/backends/cuda/fp8/graph.js';
import { launchQuantise3 } from '../../src/backends/cuda/fp8/kernels.js';
import { executeFp8Plan, fp8Plan } from '../../src/backends/cuda/fp8/plan.js';
import { allocDevice } from '../../src/backends/cuda/memory.js';
import { problemFlops } from '../../src/backends/problem.js';
import { timeOnStream } from '../../src/bench/cuda-timer.js';
import { seededInput } from '../../src/bench/measure.js';
import { calibratedScalarBlock } from './fp8-scalars.js';

const which = process.argv[2] ?? 'both';
const shape = process.argv.slice(3).map(Number);
const [B, T, N, H] = shape.length === 4 ? shape : [4, 8192, 16, 128];
const MAX_VALUES_PER_KNOB = 80;

// --- enums from the header ---------------------------------------------------------------------
const HEADERS = [
  process.env.CUDNN_HEADER ?? '',
  '/usr/include/x86_64-linux-gnu/cudnn_graph_v9.h',
  '/usr/include/cudnn_graph_v9.h',
  '/usr/include/x86_64-linux-gnu/cudnn_graph.h',
  '/usr/include/cudnn_graph.h',
];
const headerPath = HEADERS.find((p) => p && existsSync(p));
if (!headerPath) throw new Error(`no cuDNN graph header found in ${HEADERS.filter(Boolean).join(', ')}`);
const header = readFileSync(headerPath, 'utf8')
  .replace(/\/\*[\s\S]*?\*\//g, '')
  .replace(/\/\/.*$/gm, '');

/** Members of `typedef enum { … } name;` with their values (explicit or counted). */
function enumMembers(name: string): Map<string, number> {
  const match = new RegExp(`typedef enum[^{]*\\{([^}]*)\\}\\s*${name}\\s*;`).exec(header);
  if (!match) throw new Error(`enum ${name} not in ${headerPath}`);
  const members = new Map<string, number>();
  let next = 0;
  for (const part of match[1].split(',')) {
    const m = /^\s*([A-Z0-9_]+)\s*(?:=\s*([0-9]+))?\s*$/.exec(part);
    if (!m) continue;
    const value = m[2] !== undefined ? Number(m[2]) : next;
    members.set(m[1], value);
    next = value + 1;
  }
  return members;
}
const attrNames = enumMembers('cudnnBackendAttributeName_t');
const attrTypes = enumMembers('cudnnBackendAttributeType_t');
const descriptorTypes = enumMembers('cudnnBackendDescriptorType_t');
const knobTypes = enumMembers('cudnnBackendKnobType_t');
const knobName = new Map([...knobTypes].map(([k, v]) => [v, k.replace('CUDNN_KNOB_TYPE_', '')]));
const need = (map: Map<string, number>, key: string) => {
  const v = map.get(key);
  if (v === undefined) throw new Error(`${key} not in ${headerPath}`);
  return v;
};
const A = {
  ENGINE_OPERATION_GRAPH: need(attrNames, 'CUDNN_ATTR_ENGINE_OPERATION_GRAPH'),
  ENGINE_KNOB_INFO: need(attrNames, 'CUDNN_ATTR_ENGINE_KNOB_INFO'),
  ENGINECFG_KNOB_CHOICES: need(attrNames, 'CUDNN_ATTR_ENGINECFG_KNOB_CHOICES'),
  KNOB_INFO_TYPE: need(attrNames, 'CUDNN_ATTR_KNOB_INFO_TYPE'),
  KNOB_INFO_MAXIMUM_VALUE: need(attrNames, 'CUDNN_ATTR_KNOB_INFO_MAXIMUM_VALUE'),
  KNOB_INFO_MINIMUM_VALUE: need(attrNames, 'CUDNN_ATTR_KNOB_INFO_MINIMUM_VALUE'),
  KNOB_INFO_STRIDE: need(attrNames, 'CUDNN_ATTR_KNOB_INFO_STRIDE'),
  KNOB_CHOICE_KNOB_TYPE: need(attrNames, 'CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE'),
  KNOB_CHOICE_KNOB_VALUE: need(attrNames, 'CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE'),
};
const TYPE_KNOB = need(attrTypes, 'CUDNN_TYPE_KNOB_TYPE');
const D_KNOB_CHOICE = need(descriptorTypes, 'CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR');
const D_KNOB_INFO = need(descriptorTypes, 'CUDNN_BACKEND_KNOB_INFO_DESCRIPTOR');

function getEnum(descriptor: bigint, name: number, type: number): number {
  const count = new BigInt64Array(1);
  const value = new Int32Array(1);
  const status = loadCudnn().fn.cudnnBackendGetAttribute(descriptor, name, type, 1, count, value);
  if (status !== 0) throw new Error(`get attribute ${name}: status ${status}`);
  return value[0];
}

interface Knob {
  type: number;
  min: number;
  max: number;
  stride: number;
  chosen: number | null;
}

/** The engine of a heuristics config, its knobs (ranges) and the values the config chose. */
function knobsOf(config: bigint): { engine: bigint; knobs: Knob[] } {
  const engine = createDescriptor(DESCRIPTOR.ENGINE);
  getDescriptors(config, ATTR.ENGINECFG_ENGINE, [engine]);
  const infoCount = countDescriptors(engine, A.ENGINE_KNOB_INFO);
  const infos = Array.from({ length: infoCount }, () => createDescriptor(D_KNOB_INFO));
  const filled = getDescriptors(engine, A.ENGINE_KNOB_INFO, infos);
  const choiceCount = countDescriptors(config, A.ENGINECFG_KNOB_CHOICES);
  const choices = Array.from({ length: choiceCount }, () => createDescriptor(D_KNOB_CHOICE));
  const chosen = new Map<number, number>();
  const filledChoices = choiceCount ? getDescriptors(config, A.ENGINECFG_KNOB_CHOICES, choices) : 0;
  for (let i = 0; i < filledChoices; i++)
    chosen.set(
      getEnum(choices[i], A.KNOB_CHOICE_KNOB_TYPE, TYPE_KNOB),
      getInt64(choices[i], A.KNOB_CHOICE_KNOB_VALUE),
    );
  const knobs = infos.slice(0, filled).map((info) => {
    const type = getEnum(info, A.KNOB_INFO_TYPE, TYPE_KNOB);
    return {
      type,
      min: getInt64(info, A.KNOB_INFO_MINIMUM_VALUE),
      max: getInt64(info, A.KNOB_INFO_MAXIMUM_VALUE),
      stride: getInt64(info, A.KNOB_INFO_STRIDE),
      chosen: chosen.get(type) ?? null,
    };
  });
  for (const d of [...infos, ...choices]) destroyDescriptor(d);
  return { engine, knobs };
}

/** A plan of `engine` with these knob values, or the reason it does not finalize. */
function planWith(engine: bigint, values: Map<number, number>, handle: bigint): ExecutionPlan | string {
  const choices = [...values].map(([type, value]) => {
    const c = createDescriptor(D_KNOB_CHOICE);
    set.enumValue(c, A.KNOB_CHOICE_KNOB_TYPE, TYPE_KNOB, type);
    setAttribute(c, A.KNOB_CHOICE_KNOB_VALUE, ATTR_TYPE.INT64, BigInt64Array.of(BigInt(value)));
    finalize(c, 'knob choice');
    return c;
  });
  const config = createDescriptor(DESCRIPTOR.ENGINECFG);
  const plan = createDescriptor(DESCRIPTOR.EXECUTION_PLAN);
  try {
    set.descriptors(config, ATTR.ENGINECFG_ENGINE, [engine]);
    if (choices.length) set.descriptors(config, A.ENGINECFG_KNOB_CHOICES, choices);
    finalize(config, 'engine config');
    set.handle(plan, ATTR.EXECUTION_PLAN_HANDLE, handle);
    set.descriptors(plan, ATTR.EXECUTION_PLAN_ENGINE_CONFIG, [config]);
    finalize(plan, 'plan');
    return {
      plan,
      workspaceBytes: getInt64(plan, ATTR.EXECUTION_PLAN_WORKSPACE_SIZE),
      engine: -1,
      keepAlive: [config, ...choices],
    };
  } catch (error) {
    destroyDescriptor(plan);
    destroyDescriptor(config);
    for (const c of choices) destroyDescriptor(c);
    return error instanceof Error ? error.message.split('\n')[0].slice(0, 120) : String(error);
  }
}

const env = cudnnEnvironment();
if (!env.ok) throw new Error(env.reason);
const handle = cudnnHandle();
const q = seededInput([B, T, N, H], 1, 'bfloat16').to('cuda');
const k = seededInput([B, T, N, H], 2, 'bfloat16').to('cuda');
const v = seededInput([B, T, N, H], 3, 'bfloat16').to('cuda');

function sweep(what: string, graph: bigint, run: (plan: ExecutionPlan) => void, flops: number) {
  const failures: string[] = [];
  const seen = new Set<string>();
  for (const candidate of planCandidates(graph, handle, failures, ['A'])) {
    // Knobs are read off the config the plan keeps alive.
    const { engine, knobs } = knobsOf(candidate.plan.keepAlive[0]);
    console.log(
      `${what} ${candidate.source}: knobs ${knobs.map((k) => `${knobName.get(k.type) ?? k.type}=${k.chosen} [${k.min}..${k.max} step ${k.stride}]`).join(', ')}`,
    );
    const base = new Map(knobs.filter((k) => k.chosen !== null).map((k) => [k.type, k.chosen!]));
    for (const knob of knobs) {
      if (knob.max <= knob.min) continue;
      const step = Math.max(1, knob.stride);
      const values: number[] = [];
      for (let x = knob.min; x <= knob.max && values.length < MAX_VALUES_PER_KNOB; x += step) values.push(x);
      for (const value of values) {
        const choice = new Map(base).set(knob.type, value);
        const key = JSON.stringify([...choice].sort());
        if (seen.has(key)) continue;
        seen.add(key);
        const plan = planWith(engine, choice, handle);
        const label = `${what} ${knobName.get(knob.type) ?? knob.type}=${value}`;
        if (typeof plan === 'string') continue; // not a valid value for this graph
        const kernel = kernelNameFromJson(serializePlan(plan.plan)) ?? '?';
        const once = timeOnStream(() => run(plan), { iterations: 1, warmup: 1 }).median;
        const ms = once > 50 ? once : timeOnStream(() => run(plan), { iterations: 20, warmup: 3 }).median;
        console.log(
          `  ${label.padEnd(28)} ${ms.toFixed(3).padStart(7)} ms ${(flops / (ms * 1e-3) / 1e12).toFixed(0).padStart(5)} TFLOP/s  ${kernel}`,
        );
        destroyDescriptor(plan.plan);
        for (const d of plan.keepAlive) destroyDescriptor(d);
      }
    }
    destroyDescriptor(engine);
  }
}

function fp8(causal: boolean) {
  const p = validateAttention(q, k, v, { isCausal: causal });
  const features = fp8GraphFeatures(p);
  const reference = fp8Plan(features);
  const n = B * T * N * H;
  const block = calibratedScalarBlock();
  const [q8, k8, v8, o8] = [n, n, n, n].map((bytes) => allocDevice(bytes));
  launchQuantise3(
    [q.buffer.ptr, k.buffer.ptr, v.buffer.ptr],
    [q8.ptr, k8.ptr, v8.ptr],
    n,
    n,
    block.ptr,
    false,
  );
  const pointers = { q8: q8.ptr, k8: k8.ptr, v8: v8.ptr, o8: o8.ptr, scalarBlock: block.ptr };
  const materialized = materializeGraph(buildFp8Graph(features).spec, handle);
  sweep(
    `fp8${causal ? ' causal' : ''}`,
    materialized.graph,
    (plan) => executeFp8Plan({ ...reference, plan }, pointers, p.scale),
    problemFlops(p),
  );
  destroyAll(materialized.descriptors);
  for (const b of [block, q8, k8, v8, o8]) b.release();
}

function bf16(causal: boolean) {
  const p = validateAttention(q, k, v, { isCausal: causal });
  const d = describeSdpa(p, env.ok ? env.env : (undefined as never));
  if (!d.ok) throw new Error(d.reason);
  const spec = buildSdpaGraph(d.features);
  const materialized = materializeGraph(spec, handle);
  const output = allocDevice(B * T * N * H * 2);
  const entries = new Map<ExecutionPlan, CachedPlan>();
  const run = (plan: ExecutionPlan) => {
    let entry = entries.get(plan);
    if (!entry) {
      entry = { key: d.key, spec, plan, variant: '', source: 'built', setupMs: 0, graphDescriptors: [] };
      entries.set(plan, entry);
    }
    executePlan(
      entry,
      handle,
      { query: q.buffer.ptr, key: k.buffer.ptr, value: v.buffer.ptr, output: output.ptr },
      p.scale,
    );
  };
  sweep(`bf16 ${d.features.graph}${causal ? ' causal' : ''}`, materialized.graph, run, problemFlops(p));
  destroyAll(materialized.descriptors);
  output.release();
}

console.log(`cuDNN ${env.env.version}, header ${headerPath}, B=${B} T=${T} N=${N} H=${H}`);
if (which !== 'bf16') for (const causal of [false, true]) fp8(causal);
if (which !== 'fp8') for (const causal of [false, true]) bf16(causal);
