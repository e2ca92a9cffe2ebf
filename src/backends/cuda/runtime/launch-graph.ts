/**
 * A group of kernel launches enqueued as one CUDA graph once its arguments repeat (a decode step's split
 * kernel and combine: two cuLaunchKernel of 3–6 µs of host time each on an H100 against one cuGraphLaunch of
 * 2–3 µs). The launches are captured from attnlab's stream (cuStreamBeginCapture) on the second call whose
 * `signature` — every byte the launches read that can change between calls: the packed parameters with
 * their pointers — matches the call before; from then on a call with that signature is one graph launch,
 * and a new signature seen twice is captured again into the same executable graph (cuGraphExecUpdate).
 * Arguments that change every call never capture: each call launches as it would without a graph.
 * ATTNLAB_LAUNCH_GRAPH=0 turns the route off.
 */
import { config } from '../../../config.js';
import { DeviceError } from '../../../errors.js';
import { cu } from '../ffi/driver.js';
import { getCudaContext } from './context.js';

/** CU_STREAM_CAPTURE_MODE_RELAXED: the capture forbids no API call on this or another thread. */
const CAPTURE_RELAXED = 2;

/** Per launch group (one per kept plan of one device): its executable graph and the signatures seen. */
export interface LaunchGraph {
  exec: bigint;
  /** The signature the executable graph was captured with. */
  captured: Uint8Array | null;
  /** The signature of the last call launched without the graph. */
  last: Uint8Array | null;
  refused: boolean;
}

export function newLaunchGraph(): LaunchGraph {
  return { exec: 0n, captured: null, last: null, refused: false };
}

/** Destroys the group's executable graph (its plan is being dropped). */
export function forgetLaunchGraph(group: LaunchGraph): void {
  if (group.exec !== 0n) cu().cuGraphExecDestroy(group.exec);
  group.exec = 0n;
  group.captured = null;
  group.last = null;
}

/** How groups were enqueued, for tests and measurements. */
export const launchGraphStats = { graphLaunches: 0, captures: 0, plain: 0 };

/**
 * Enqueues `launches` on attnlab's stream: one graph launch where `signature` is the graph's, a capture
 * and a graph launch where it matches the previous call's, the launches themselves otherwise.
 */
export function launchGrouped(group: LaunchGraph, signature: Uint8Array, launches: () => void): void {
  if (group.refused || !config().experimental.launchGraph) {
    launches();
    launchGraphStats.plain++;
    return;
  }
  const { stream } = getCudaContext();
  if (group.captured !== null && sameBytes(group.captured, signature)) {
    cu().cuGraphLaunch(group.exec, stream);
    launchGraphStats.graphLaunches++;
    return;
  }
  if (group.last === null || !sameBytes(group.last, signature)) {
    launches();
    launchGraphStats.plain++;
    if (group.last === null || group.last.byteLength !== signature.byteLength) group.last = signature.slice();
    else group.last.set(signature);
    return;
  }
  if (!capture(group, stream, launches)) {
    launches();
    launchGraphStats.plain++;
    return;
  }
  group.captured = signature.slice();
  cu().cuGraphLaunch(group.exec, stream);
  launchGraphStats.graphLaunches++;
}

/** Captures `launches` into the group's executable graph; false (the group refused for good) on failure. */
function capture(group: LaunchGraph, stream: bigint, launches: () => void): boolean {
  const d = cu();
  const slot = new BigUint64Array(1);
  let graph = 0n;
  try {
    d.cuStreamBeginCapture_v2(stream, CAPTURE_RELAXED);
    try {
      launches();
    } finally {
      d.cuStreamEndCapture(stream, slot);
      graph = slot[0];
    }
    if (group.exec !== 0n) {
      try {
        d.cuGraphExecUpdate_v2(group.exec, graph, updateResult);
      } catch (error) {
        if (!(error instanceof DeviceError)) throw error;
        d.cuGraphExecDestroy(group.exec);
        group.exec = 0n;
      }
    }
    if (group.exec === 0n) {
      d.cuGraphInstantiateWithFlags(slot, graph, 0n);
      group.exec = slot[0];
    }
    launchGraphStats.captures++;
    return true;
  } catch (error) {
    if (!(error instanceof DeviceError)) throw error;
    group.refused = true;
    if (config().debug >= 1)
      console.error(`[attnlab] launches not captured as a CUDA graph (${error.message}); plain launches`);
    return false;
  } finally {
    if (graph !== 0n) d.cuGraphDestroy(graph);
  }
}

/** CUgraphExecUpdateResultInfo: the result, the node that failed and the node it came from. */
const updateResult = new BigUint64Array(3);

/** Compared as 32-bit words where both are aligned (packed parameters are), else byte by byte. */
function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  const n = a.byteLength;
  if (n !== b.byteLength) return false;
  if (n % 4 === 0 && a.byteOffset % 4 === 0 && b.byteOffset % 4 === 0) {
    const x = new Uint32Array(a.buffer, a.byteOffset, n / 4);
    const y = new Uint32Array(b.buffer, b.byteOffset, n / 4);
    for (let i = 0; i < x.length; i++) if (x[i] !== y[i]) return false;
    return true;
  }
  for (let i = 0; i < n; i++) if (a[i] !== b[i]) return false;
  return true;
}
