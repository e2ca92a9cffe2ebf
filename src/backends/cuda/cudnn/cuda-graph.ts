/**
 * cuDNN's CUDA-graph route: a plan and variant pack written once into a driver graph
 * (cudnnBackendPopulateCudaGraph, cuDNN ≥ 9.5), instantiated, then enqueued with one cuGraphLaunch a
 * call. cudnnBackendExecute redoes cuDNN's host work every call (~10 µs of a ~20 µs call on an H100,
 * driver 580, cuDNN 9.19); a graph launch of the same kernels costs the driver ~2–3 µs.
 *
 * A variant pack (one set of pointers) gets its graph on its second call, so that pointers that never
 * repeat cost one cudnnBackendExecute each and no instantiation. By-value scalars (the scale) are
 * baked into the graph's kernel parameters when it is populated: a call with the same pointers and
 * another scale rewrites the graph (cudnnBackendUpdateCudaGraph) and the executable graph
 * (cuGraphExecUpdate). Where cuDNN refuses the route for a plan (an engine without native graph
 * support answers NOT_SUPPORTED) the plan keeps to cudnnBackendExecute, said once under ATTNLAB_DEBUG;
 * ATTNLAB_CUDNN_CUDA_GRAPH=0 turns the route off.
 */

import { config } from '../../../config.js';
import { DeviceError } from '../../../errors.js';
import { type Cudnn, check, loadCudnn } from '../ffi/cudnn.js';
import { cu } from '../ffi/driver.js';
import { getCudaContext } from '../runtime/context.js';

/** One variant pack's graph: none until the pack's second call. */
interface PackGraph {
  uses: number;
  graph: bigint;
  exec: bigint;
  /** The scale baked into the graph's kernels. */
  scale: number;
}

/** Per plan: whether the route works for it, and its packs' graphs. */
export interface GraphRoute {
  refused: boolean;
  readonly graphs: Map<bigint, PackGraph>;
}

export function newGraphRoute(): GraphRoute {
  return { refused: false, graphs: new Map() };
}

/** How each plan's calls were enqueued, for tests and `measure-auto.ts`. */
export const graphRouteStats = { launches: 0, populated: 0, updated: 0, executes: 0, refusals: 0 };

/**
 * Enqueues `plan` with `pack` on attnlab's stream: a graph launch where the pack has a graph for this
 * scale, else cudnnBackendExecute (and the pack's graph made on its second call). `label` names the
 * plan in the ATTNLAB_DEBUG line of a refusal.
 */
export function enqueuePlan(
  route: GraphRoute,
  handle: bigint,
  plan: bigint,
  pack: bigint,
  scale: number,
  label: string,
): void {
  const lib = loadCudnn();
  if (route.refused || lib.graphFn === null || !config().experimental.cudnnCudaGraph) {
    execute(lib, handle, plan, pack);
    return;
  }
  const known = route.graphs.get(pack);
  if (known !== undefined && known.exec !== 0n && known.scale === scale) {
    launchOrRefuse(route, lib, handle, plan, pack, known.exec, label);
    return;
  }
  if (known === undefined) {
    route.graphs.set(pack, { uses: 1, graph: 0n, exec: 0n, scale });
    execute(lib, handle, plan, pack);
    return;
  }
  known.uses++;
  const ready =
    known.exec === 0n ? populate(lib, handle, plan, pack, known) : update(lib, handle, plan, pack, known);
  if (!ready) {
    refuse(route, lib, label);
    execute(lib, handle, plan, pack);
    return;
  }
  known.scale = scale;
  launchOrRefuse(route, lib, handle, plan, pack, known.exec, label);
}

/** Launches the graph; where the driver refuses the launch, the plan keeps to execute from now on (this call too). */
function launchOrRefuse(
  route: GraphRoute,
  lib: Cudnn,
  handle: bigint,
  plan: bigint,
  pack: bigint,
  exec: bigint,
  label: string,
): void {
  try {
    cu().cuGraphLaunch(exec, getCudaContext().stream);
  } catch (error) {
    if (!(error instanceof DeviceError)) throw error;
    refuse(route, lib, label, error.message);
    execute(lib, handle, plan, pack);
    return;
  }
  graphRouteStats.launches++;
}

function execute(lib: Cudnn, handle: bigint, plan: bigint, pack: bigint): void {
  check('cudnnBackendExecute', lib.fn.cudnnBackendExecute(handle, plan, pack));
  graphRouteStats.executes++;
}

/** A new graph of the plan with this pack, instantiated; false where cuDNN or the driver refuses. */
function populate(lib: Cudnn, handle: bigint, plan: bigint, pack: bigint, into: PackGraph): boolean {
  const graphFn = lib.graphFn;
  if (graphFn === null) return false;
  const driver = cu();
  const slot = new BigUint64Array(1);
  driver.cuGraphCreate(slot, 0);
  const graph = slot[0];
  if (graphFn.cudnnBackendPopulateCudaGraph(handle, plan, pack, graph) !== 0) {
    driver.cuGraphDestroy(graph);
    return false;
  }
  try {
    driver.cuGraphInstantiateWithFlags(slot, graph, 0n);
  } catch (error) {
    driver.cuGraphDestroy(graph);
    if (error instanceof DeviceError) return false;
    throw error;
  }
  into.graph = graph;
  into.exec = slot[0];
  graphRouteStats.populated++;
  return true;
}

/**
 * The pack's graph rewritten for the scale now in the host scalars (cuDNN reads them again) and pushed
 * into its executable graph; where either step refuses, a fresh graph instead.
 */
function update(lib: Cudnn, handle: bigint, plan: bigint, pack: bigint, entry: PackGraph): boolean {
  const graphFn = lib.graphFn;
  if (graphFn === null) return false;
  if (graphFn.cudnnBackendUpdateCudaGraph(handle, plan, pack, entry.graph) === 0) {
    try {
      cu().cuGraphExecUpdate_v2(entry.exec, entry.graph, updateResult);
      graphRouteStats.updated++;
      return true;
    } catch (error) {
      if (!(error instanceof DeviceError)) throw error;
    }
  }
  destroyPackGraph(entry);
  return populate(lib, handle, plan, pack, entry);
}

/** CUgraphExecUpdateResultInfo: the result, the node that failed and the node it came from. */
const updateResult = new BigUint64Array(3);

function refuse(route: GraphRoute, lib: Cudnn, label: string, reason?: string): void {
  route.refused = true;
  graphRouteStats.refusals++;
  for (const entry of route.graphs.values()) destroyPackGraph(entry);
  route.graphs.clear();
  if (config().debug >= 1)
    console.error(
      `[attnlab] cudnn ${label}: no CUDA graph (${reason ?? (lib.lastError() || 'the driver refused the graph')}); cudnnBackendExecute each call`,
    );
}

function destroyPackGraph(entry: PackGraph): void {
  const driver = cu();
  if (entry.exec !== 0n) driver.cuGraphExecDestroy(entry.exec);
  if (entry.graph !== 0n) driver.cuGraphDestroy(entry.graph);
  entry.exec = 0n;
  entry.graph = 0n;
}

/** Drops the graph of a pack that is being destroyed (its handle may come back for another pack). */
export function forgetPackGraph(route: GraphRoute, pack: bigint): void {
  const entry = route.graphs.get(pack);
  if (entry === undefined) return;
  destroyPackGraph(entry);
  route.graphs.delete(pack);
}

/** Drops every graph of a plan that is being dropped from the cache. */
export function forgetGraphRoute(route: GraphRoute): void {
  for (const entry of route.graphs.values()) destroyPackGraph(entry);
  route.graphs.clear();
}
