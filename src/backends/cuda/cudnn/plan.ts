/**
 * Execution plans: from an operation graph through cuDNN's heuristics to the first engine config
 * that finalizes, or from a plan's serialized JSON. Building is the expensive step (0.35–1 s for a
 * new kernel, since the flash engines compile at run time; 40–55 ms when the kernel is already
 * compiled in this process); loading the JSON, which embeds the compiled kernel, takes 1.5–8 ms.
 */
import { UnsupportedError } from '../../../errors.js';
import {
  countDescriptors,
  createDescriptor,
  destroyDescriptor,
  finalize,
  getDescriptors,
  getInt64,
  getString,
  loadCudnn,
  set,
  setAttribute,
} from '../ffi/cudnn.js';
import { ATTR, ATTR_TYPE, DESCRIPTOR, HEUR_MODE } from '../ffi/cudnn-constants.js';
import type { GraphSpec } from './graph-spec.js';
import { destroyAll, materializeGraph } from './materialize.js';

export interface ExecutionPlan {
  readonly plan: bigint;
  readonly workspaceBytes: number;
  /** cuDNN's global engine index, or -1 when unknown (a plan loaded from JSON). */
  readonly engine: number;
  /** Descriptors the plan was made from, kept alive as long as the plan (cudnn-frontend does too). */
  readonly keepAlive: readonly bigint[];
}

/** Heuristic modes asked in order by default: A, then FALLBACK, as cudnn-frontend does. */
export const DEFAULT_HEURISTIC_MODES = ['A', 'FALLBACK'] as const;

export type HeuristicModeName = keyof typeof HEUR_MODE;

/** A finalized plan and where heuristics ranked its config ("A#0"). */
export interface PlanCandidate {
  readonly plan: ExecutionPlan;
  readonly source: string;
}

/**
 * Finalized plans, lazily, in the order heuristics rank their engine configs (mode by mode). A
 * config that fails to finalize is normal (a first config that fails to compile, say) and its reason
 * goes into `failures`. Stopping early (break, or taking the first) destroys the unused configs.
 */
export function* planCandidates(
  graph: bigint,
  handle: bigint,
  failures: string[],
  modes: readonly HeuristicModeName[] = DEFAULT_HEURISTIC_MODES,
): Generator<PlanCandidate> {
  for (const modeName of modes) {
    const heuristics = createDescriptor(DESCRIPTOR.ENGINEHEUR);
    const configs: bigint[] = [];
    try {
      set.descriptors(heuristics, ATTR.ENGINEHEUR_OPERATION_GRAPH, [graph]);
      set.enumValue(heuristics, ATTR.ENGINEHEUR_MODE, ATTR_TYPE.HEUR_MODE, HEUR_MODE[modeName]);
      finalize(heuristics, `engine heuristics (mode ${modeName})`);
      // The count can overstate what the fill returns (support checks run during the fill).
      const upperBound = countDescriptors(heuristics, ATTR.ENGINEHEUR_RESULTS);
      for (let i = 0; i < upperBound; i++) configs.push(createDescriptor(DESCRIPTOR.ENGINECFG));
      const filled = upperBound > 0 ? getDescriptors(heuristics, ATTR.ENGINEHEUR_RESULTS, configs) : 0;
      if (filled === 0)
        failures.push(
          `heuristics ${modeName}: no engine config (${loadCudnn().lastError() || 'no reason given'})`,
        );
      for (let i = 0; i < filled; i++) {
        const plan = createDescriptor(DESCRIPTOR.EXECUTION_PLAN);
        let candidate: PlanCandidate;
        try {
          set.handle(plan, ATTR.EXECUTION_PLAN_HANDLE, handle);
          set.descriptors(plan, ATTR.EXECUTION_PLAN_ENGINE_CONFIG, [configs[i]]);
          finalize(plan, `execution plan (heuristics ${modeName}, config ${i})`);
          // The plan keeps its config alive (cudnn-frontend does too): it leaves the clean-up list.
          const config = configs[i];
          configs[i] = 0n;
          candidate = {
            plan: {
              plan,
              workspaceBytes: getInt64(plan, ATTR.EXECUTION_PLAN_WORKSPACE_SIZE),
              engine: engineIndex(config),
              keepAlive: [config],
            },
            source: `${modeName}#${i}`,
          };
        } catch (error) {
          destroyDescriptor(plan);
          failures.push(
            `heuristics ${modeName} config ${i}: ${error instanceof Error ? error.message : error}`,
          );
          continue;
        }
        yield candidate;
      }
    } finally {
      for (const config of configs) if (config !== 0n) destroyDescriptor(config);
      destroyDescriptor(heuristics);
    }
  }
}

/** A plan ready to execute, with the graph description that says what each uid is bound to. */
export interface CachedPlan {
  readonly key: string;
  readonly spec: GraphSpec;
  readonly plan: ExecutionPlan;
  /** The engine and kernel, for results: "cudnn 9.19.0 composite engine 2 cudnn_generated_…". */
  readonly variant: string;
  readonly source: 'built' | 'disk';
  /** Time to obtain the plan (build or load), ms. */
  readonly setupMs: number;
  readonly graphDescriptors: readonly bigint[];
}

/**
 * The first plan that finalizes, in heuristics order (A, then FALLBACK). Throws UnsupportedError
 * with every config's reason when none does.
 */
export function buildPlan(graph: bigint, handle: bigint): ExecutionPlan {
  const failures: string[] = [];
  for (const candidate of planCandidates(graph, handle, failures)) return candidate.plan;
  throw new UnsupportedError(
    `cudnn ${loadCudnn().description}`,
    `no engine can run this graph: ${failures.join('; ')}`,
  );
}

/**
 * Materializes `spec` and builds its first plan (buildPlan). The graph's descriptors are returned to
 * be kept alive with the plan, as cudnn-frontend keeps them; on failure they are destroyed here.
 */
export function buildPlanForSpec(
  spec: GraphSpec,
  handle: bigint,
): { plan: ExecutionPlan; graphDescriptors: readonly bigint[] } {
  const graph = materializeGraph(spec, handle);
  try {
    return { plan: buildPlan(graph.graph, handle), graphDescriptors: graph.descriptors };
  } catch (error) {
    destroyAll(graph.descriptors);
    throw error;
  }
}

/** Destroys a plan and the descriptors it kept alive. */
export function destroyPlan(plan: ExecutionPlan): void {
  destroyDescriptor(plan.plan);
  for (const descriptor of plan.keepAlive) destroyDescriptor(descriptor);
}

/** The plan as JSON (kernel included), for the disk cache. */
export function serializePlan(plan: bigint): string {
  return getString(plan, ATTR.EXECUTION_PLAN_JSON_REPRESENTATION);
}

/** A plan from its JSON; throws DeviceError when this cuDNN refuses it. */
export function deserializePlan(json: string, handle: bigint): ExecutionPlan {
  const plan = createDescriptor(DESCRIPTOR.EXECUTION_PLAN);
  try {
    setAttribute(plan, ATTR.EXECUTION_PLAN_JSON_REPRESENTATION, ATTR_TYPE.CHAR, Buffer.from(json, 'utf8'));
    set.handle(plan, ATTR.EXECUTION_PLAN_HANDLE, handle);
    finalize(plan, 'execution plan from JSON');
    return {
      plan,
      workspaceBytes: getInt64(plan, ATTR.EXECUTION_PLAN_WORKSPACE_SIZE),
      engine: -1,
      keepAlive: [],
    };
  } catch (error) {
    destroyDescriptor(plan);
    throw error;
  }
}

/**
 * The kernel a plan runs, read from its JSON (for example
 * `cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x128_4x1x1_cga1x1x1_kernel0_0`).
 */
export function kernelNameFromJson(json: string): string | null {
  const generated = /cudnn_generated_[A-Za-z0-9_]+/.exec(json);
  if (generated) return generated[0];
  const named = /"kernel_?name"\s*:\s*"([^"]+)"/i.exec(json);
  return named ? named[1] : null;
}

/** The engine of an engine config (ENGINECFG_ENGINE → ENGINE_GLOBAL_INDEX), or -1 if unreadable. */
function engineIndex(config: bigint): number {
  const engine = createDescriptor(DESCRIPTOR.ENGINE);
  try {
    getDescriptors(config, ATTR.ENGINECFG_ENGINE, [engine]);
    return getInt64(engine, ATTR.ENGINE_GLOBAL_INDEX);
  } catch {
    return -1;
  } finally {
    destroyDescriptor(engine);
  }
}
