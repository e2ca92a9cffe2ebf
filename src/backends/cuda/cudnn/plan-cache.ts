/**
 * Execution plans cached by graph key: in memory for this process, and on disk across processes.
 *
 * A repeated shape costs a Map lookup. A shape seen by an earlier process costs a JSON read and a
 * plan deserialization (1.5–8 ms measured on the H200) instead of a graph build, heuristics and a
 * run-time kernel compile (0.35–1 s). Neither JAX nor PyTorch keeps cuDNN plans across processes.
 *
 * Disk files live in $ATTNLAB_CACHE_DIR/cudnn-plans (default ~/.cache/attnlab/cudnn-plans), one per
 * (cache format, cuDNN version, GPU, graph key), written to a temporary file and renamed so a
 * reader never sees half a file. ATTNLAB_CUDNN_PLAN_CACHE=0 turns the disk layer off.
 */

import { createHash } from 'node:crypto';
import { mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { type AttnlabConfig, config } from '../../../config.js';
import { forgetLaunch } from './execute.js';
import type { CudnnEnvironment, SdpaFeatures } from './features.js';
import type { GraphSpec } from './graph-spec.js';
import { destroyAll } from './materialize.js';
import {
  buildPlanForSpec,
  type CachedPlan,
  deserializePlan,
  type ExecutionPlan,
  kernelNameFromJson,
  serializePlan,
} from './plan.js';
import { buildSdpaGraph } from './sdpa-graph.js';

/** Bumped when the file layout or the graphs change meaning, so old files are not read. */
const CACHE_FORMAT = 1;

interface DiskEntry {
  readonly format: number;
  readonly cudnnVersion: number;
  readonly gpu: string;
  readonly key: string;
  readonly variant: string;
  readonly plan: string;
}

export interface PlanCacheStats {
  memoryHits: number;
  diskHits: number;
  builds: number;
  diskWrites: number;
}

const memory = new Map<string, CachedPlan>();
const stats: PlanCacheStats = { memoryHits: 0, diskHits: 0, builds: 0, diskWrites: 0 };

/** Counters since the process started (tests assert that a repeated call builds nothing). */
export function planCacheStats(): Readonly<PlanCacheStats> {
  return { ...stats };
}

/** The folder of plan files, or null when the disk cache is turned off. */
export function planCacheDir(settings: AttnlabConfig = config()): string | null {
  return settings.cudnnPlanCacheDir;
}

/** The file name of a plan: a hash of everything that must match for the plan to be reusable. */
export function planFileName(key: string, env: CudnnEnvironment): string {
  const { major, minor } = env.computeCapability;
  const identity = `${CACHE_FORMAT}|${env.version}|${env.gpuName}|sm${major}${minor}|${key}`;
  return `${createHash('sha256').update(identity).digest('hex').slice(0, 40)}.json`;
}

/**
 * The plan for `features` (whose JSON is `key`): from memory, else disk, else built (and then
 * written to disk). `build` makes the graph (the forward's by default; the backward passes its own,
 * with its pass in the key); `kind` labels the variant.
 */
export function getPlan<F extends SdpaFeatures>(
  key: string,
  features: F,
  env: CudnnEnvironment,
  handle: bigint,
  build: (features: F) => GraphSpec = buildSdpaGraph,
  kind: string = features.graph,
): CachedPlan {
  // A plan is bound to the handle (one per device) it was built with: the handle is part of the key.
  const memoryKey = `${handle}|${key}`;
  const hit = memory.get(memoryKey);
  if (hit) {
    stats.memoryHits++;
    return hit;
  }
  const started = performance.now();
  const spec = build(features);
  const label = `cudnn ${versionText(env.version)} ${kind}`;
  const dir = planCacheDir();
  const file = dir ? join(dir, planFileName(key, env)) : null;
  const fromDisk = file ? loadFromDisk(file, key, env, handle) : null;
  let entry: CachedPlan;
  if (fromDisk) {
    stats.diskHits++;
    entry = {
      key,
      spec,
      plan: fromDisk.plan,
      variant: fromDisk.variant,
      source: 'disk',
      setupMs: 0,
      graphDescriptors: [],
    };
  } else {
    const { plan, graphDescriptors } = buildPlanForSpec(spec, handle);
    stats.builds++;
    const json = serializePlan(plan.plan);
    const kernel = kernelNameFromJson(json) ?? 'kernel name not in plan';
    const variant = `${label} engine ${plan.engine} ${kernel}`;
    entry = { key, spec, plan, variant, source: 'built', setupMs: 0, graphDescriptors };
    if (file && dir)
      saveToDisk(dir, file, {
        format: CACHE_FORMAT,
        cudnnVersion: env.version,
        gpu: env.gpuName,
        key,
        variant,
        plan: json,
      });
  }
  entry = { ...entry, setupMs: performance.now() - started };
  memory.set(memoryKey, entry);
  return entry;
}

/** Forgets every in-memory plan (the disk files stay): the next call of a shape goes to disk. */
/** Bumped when plans leave memory: a plan a caller kept from an earlier generation may be destroyed. */
let generation = 0;

/** The memory cache's generation (see clearMemoryPlanCache). */
export function planCacheGeneration(): number {
  return generation;
}

export function clearMemoryPlanCache(): void {
  generation++;
  for (const entry of memory.values()) {
    forgetLaunch(entry);
    destroyAll([...entry.graphDescriptors, ...entry.plan.keepAlive, entry.plan.plan]);
  }
  memory.clear();
}

function loadFromDisk(
  file: string,
  key: string,
  env: CudnnEnvironment,
  handle: bigint,
): { plan: ExecutionPlan; variant: string } | null {
  let entry: DiskEntry;
  try {
    entry = JSON.parse(readFileSync(file, 'utf8')) as DiskEntry;
  } catch {
    return null; // absent or unreadable: build instead
  }
  if (
    entry.format !== CACHE_FORMAT ||
    entry.cudnnVersion !== env.version ||
    entry.gpu !== env.gpuName ||
    entry.key !== key
  ) {
    return null;
  }
  try {
    return { plan: deserializePlan(entry.plan, handle), variant: entry.variant };
  } catch {
    return null; // this cuDNN refuses the file (e.g. a different build): rebuild and overwrite it
  }
}

function saveToDisk(dir: string, file: string, entry: DiskEntry): void {
  try {
    mkdirSync(dir, { recursive: true });
    const temporary = `${file}.${process.pid}.${Date.now()}.tmp`;
    writeFileSync(temporary, JSON.stringify(entry));
    renameSync(temporary, file);
    stats.diskWrites++;
  } catch {
    // A read-only or full disk only costs the next process a rebuild.
  }
}

export function versionText(version: number): string {
  return `${Math.floor(version / 10000)}.${Math.floor(version / 100) % 100}.${version % 100}`;
}
