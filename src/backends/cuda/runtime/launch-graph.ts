/**
 * A group of kernel launches enqueued as one CUDA graph once its arguments repeat (a decode step's split
 * kernel and combine: two cuLaunchKernel of 3–6 µs of host time each on an H100 against one cuGraphLaunch of
 * 2–3 µs). The launches are captured from attnlab's stream (cuStreamBeginCapture) on the second call whose
 * `signature` — every byte the launches read that can change between calls: the packed parameters with
 * their pointers — matches the call before; from then on a call with that signature is one graph launch,
 * and a new signature seen twice is captured again into the same executable graph (cuGraphExecUpdate).
 * Arguments that change every call never capture: each call launches as it would without a graph.
 * ATTNLAB_LAUNCH_GRAPH=0 turns the route off; unset or =1 keeps it to the groups not marked `optIn` (a decode
 * step's); =all captures the opt-in groups too (naive's launches, a KVCache append's, the flash backward's), which
 * stay opt-in until the GPU suite has run them.
 */
import { config } from '../../../config.js';
import { DeviceError } from '../../../errors.js';
import { cu } from '../ffi/driver.js';
import { getCudaContext } from './context.js';

/** CU_STREAM_CAPTURE_MODE_RELAXED: the capture forbids no API call on this or another thread. */
const CAPTURE_RELAXED = 2;

/** Per launch group (one per kept plan of one device): its executable graph and the signatures seen. */
export interface LaunchGraph {
  /** A group only ATTNLAB_LAUNCH_GRAPH=all captures (naive's launches, a KVCache append's, the flash backward's). */
  readonly optIn: boolean;
  exec: bigint;
  /** The signature the executable graph was captured with. */
  captured: Uint8Array | null;
  /** The signature of the last call launched without the graph. */
  last: Uint8Array | null;
  refused: boolean;
}

export function newLaunchGraph(optIn = false): LaunchGraph {
  return { optIn, exec: 0n, captured: null, last: null, refused: false };
}

/** Destroys the group's executable graph (its plan is being dropped). */
export function forgetLaunchGraph(group: LaunchGraph): void {
  if (group.exec !== 0n) cu().cuGraphExecDestroy(group.exec);
  group.exec = 0n;
  group.captured = null;
  group.last = null;
}

/**
 * The group of `groups` (at most `most`, made here with `optIn`) for a call with this signature: the one whose
 * graph was captured with it, else the one that saw it last (its second sighting captures it), else a new one,
 * else the least recently used without a graph, else the least recently used. For launches whose buffers come back from the pool in a
 * cycle of a few arrangements (a training step's gradients and outputs of one size rotate through the same
 * blocks): each arrangement keeps its own graph, where one group would capture none.
 */
export function launchGroupFor(
  groups: LaunchGraph[],
  signature: Uint8Array,
  most: number,
  optIn: boolean,
): LaunchGraph {
  let at = -1;
  for (let i = 0; i < groups.length && at < 0; i++) {
    const captured = groups[i].captured;
    if (captured !== null && sameBytes(captured, signature)) at = i;
  }
  for (let i = 0; i < groups.length && at < 0; i++) {
    const last = groups[i].last;
    if (last !== null && sameBytes(last, signature)) at = i;
  }
  if (at < 0 && groups.length < most) {
    groups.unshift(newLaunchGraph(optIn));
    return groups[0];
  }
  for (let i = groups.length - 1; i >= 0 && at < 0; i--) if (groups[i].captured === null) at = i;
  if (at < 0) at = groups.length - 1;
  const group = groups[at];
  if (at > 0) {
    groups.splice(at, 1);
    groups.unshift(group);
  }
  return group;
}

/** How groups were enqueued, for tests and measurements. */
export const launchGraphStats = { graphLaunches: 0, captures: 0, plain: 0 };

/** What a caller does after beginLaunchGroup: nothing (the graph ran), its launches, or its launches then endLaunchGroup. */
export const GROUP_LAUNCHED = 0;
export const GROUP_PLAIN = 1;
export const GROUP_CAPTURING = 2;
export type GroupStep = typeof GROUP_LAUNCHED | typeof GROUP_PLAIN | typeof GROUP_CAPTURING;

/**
 * Starts a call of the group with this signature: GROUP_LAUNCHED where it matches the graph's (one graph
 * launch enqueued), GROUP_CAPTURING where it matches the previous call's (the stream is capturing: make the
 * launches, then call endLaunchGroup), GROUP_PLAIN otherwise (make the launches). No closure a call: under
 * tsx each closure made in a hot path costs a defineProperty of its name.
 */
export function beginLaunchGroup(group: LaunchGraph, signature: Uint8Array): GroupStep {
  const settings = config().experimental;
  if (group.refused || !settings.launchGraph || (group.optIn && !settings.launchGraphAll)) {
    launchGraphStats.plain++;
    return GROUP_PLAIN;
  }
  if (group.captured !== null && sameBytes(group.captured, signature)) {
    try {
      cu().cuGraphLaunch(group.exec, getCudaContext().stream);
    } catch (error) {
      if (!(error instanceof DeviceError)) throw error;
      refuse(group, error);
      launchGraphStats.plain++;
      return GROUP_PLAIN;
    }
    launchGraphStats.graphLaunches++;
    return GROUP_LAUNCHED;
  }
  if (group.last === null || !sameBytes(group.last, signature)) {
    launchGraphStats.plain++;
    if (group.last === null || group.last.byteLength !== signature.byteLength) group.last = signature.slice();
    else group.last.set(signature);
    return GROUP_PLAIN;
  }
  try {
    cu().cuStreamBeginCapture_v2(getCudaContext().stream, CAPTURE_RELAXED);
  } catch (error) {
    if (!(error instanceof DeviceError)) throw error;
    refuse(group, error);
    launchGraphStats.plain++;
    return GROUP_PLAIN;
  }
  return GROUP_CAPTURING;
}

/**
 * Ends the capture beginLaunchGroup started: with `launched` (every launch was made) the graph is instantiated
 * (or the group's updated) and launched; without, or where the driver refuses, nothing runs from the capture
 * and the caller's launches must be made again, plainly (returns false).
 */
export function endLaunchGroup(group: LaunchGraph, signature: Uint8Array, launched: boolean): boolean {
  const d = cu();
  const { stream } = getCudaContext();
  const slot = new BigUint64Array(1);
  let graph = 0n;
  try {
    d.cuStreamEndCapture(stream, slot);
    graph = slot[0];
    if (!launched) return false;
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
    group.captured = signature.slice();
    d.cuGraphLaunch(group.exec, stream);
    launchGraphStats.graphLaunches++;
    return true;
  } catch (error) {
    if (!(error instanceof DeviceError)) throw error;
    refuse(group, error);
    return false;
  } finally {
    if (graph !== 0n) d.cuGraphDestroy(graph);
  }
}

function refuse(group: LaunchGraph, error: DeviceError): void {
  group.refused = true;
  forgetLaunchGraph(group);
  if (config().debug >= 1)
    console.error(`[attnlab] launches not captured as a CUDA graph (${error.message}); plain launches`);
}

/** CUgraphExecUpdateResultInfo: the result, the node that failed and the node it came from. */
const updateResult = new BigUint64Array(3);

/** Compared as 32-bit words where both are aligned (packed parameters are), else byte by byte. */
export function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
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
