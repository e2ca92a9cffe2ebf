/**
 * The launcher of src/kernels/ops/kv_append.cu: new K and V rows scattered into a paged cache's
 * pools in one launch (KVCache's append on the GPU). A decode loop's appends repeat their parameters
 * step after step (the new rows' buffers come back from the pool at the same addresses, the slots are
 * uploaded into the same block): from the second such step the launch is a
 * captured graph's (runtime/launch-graph.ts), one cuGraphLaunch of 2–3 µs of host time against a
 * cuLaunchKernel's 3–6 µs on an H100, under ATTNLAB_LAUNCH_GRAPH=all (opt-in).
 */
import { config } from '../../../config.js';
import { loadKernels } from '../runtime/compile.js';
import { currentDeviceOrdinal } from '../runtime/context.js';
import { launchKernel, packStruct } from '../runtime/launch.js';
import {
  beginLaunchGroup,
  endLaunchGroup,
  forgetLaunchGraph,
  GROUP_CAPTURING,
  GROUP_LAUNCHED,
  type LaunchGraph,
  newLaunchGraph,
} from '../runtime/launch-graph.js';
import { copyInt32ToDevice } from '../runtime/memory.js';

const NAME = 'attnlab_kv_append';

export interface AppendOperands {
  readonly key: bigint;
  readonly value: bigint;
  readonly keyPool: bigint;
  readonly valuePool: bigint;
  /** Elements per token row of K (K·H) and of V (K·Hv); multiples of 8. */
  readonly keyRow: number;
  readonly valueRow: number;
}

/** Row i of the new keys and values goes to pool slot slots[i]. */
export function appendToPools(operands: AppendOperands, slots: Int32Array): void {
  if (slots.length === 0) return;
  // Uploaded before the launch group begins: a capture records the launch alone, and the graph reads the
  // slots from this buffer's address, rewritten on the stream each step.
  const slotBuffer = copyInt32ToDevice(slots);
  try {
    appendFromDevice(operands, slotBuffer.ptr, slots.length);
  } finally {
    slotBuffer.release(); // stream-ordered: only later work on the stream gets the block again
  }
}

/**
 * Row i of the new keys and values goes to pool slot slots[i], the `rows` slots already enqueued into device
 * memory at `slots` (int32): a KVCache uploads them with its lengths, one copy for both.
 */
export function appendFromDevice(operands: AppendOperands, slots: bigint, rows: number): void {
  if (rows === 0) return;
  const fn = appendKernel();
  // AppendParams (kv_append.cu), laid out once and rewritten in place: a struct of 8 field objects a call
  // costs more than the launch's own marshalling.
  const { view, offsets } = PARAMS;
  view.setBigUint64(offsets[0], operands.key, true);
  view.setBigUint64(offsets[1], operands.value, true);
  view.setBigUint64(offsets[2], operands.keyPool, true);
  view.setBigUint64(offsets[3], operands.valuePool, true);
  view.setBigUint64(offsets[4], slots, true);
  view.setBigInt64(offsets[5], BigInt(operands.keyRow), true);
  view.setBigInt64(offsets[6], BigInt(operands.valueRow), true);
  view.setInt32(offsets[7], rows, true);
  // The parameters are all the launch reads that can change (the grid follows from the rows and row
  // lengths in them): their bytes are the graph's signature.
  const group = appendGroup();
  const step = beginLaunchGroup(group, PARAMS.bytes);
  if (step !== GROUP_LAUNCHED) {
    let launched = false;
    try {
      launchAppend(fn, rows, operands);
      launched = true;
    } finally {
      // A capture the driver refused ran nothing: the launch again, plainly.
      if (step === GROUP_CAPTURING && !endLaunchGroup(group, PARAMS.bytes, launched) && launched)
        launchAppend(fn, rows, operands);
    }
  }
}

function launchAppend(fn: bigint, rows: number, operands: AppendOperands): void {
  const chunks = (rows * Math.max(operands.keyRow, operands.valueRow)) / 8;
  launchKernel(fn, { grid: [Math.min(Math.ceil(chunks / 256), 1024), 2, 1], block: [256, 1, 1] }, [
    PARAMS.arg,
  ]);
}

/** AppendParams' fields in declaration order: src[2], pool[2], slots, row[2], rows. */
const PARAMS = (() => {
  const types = ['ptr', 'ptr', 'ptr', 'ptr', 'ptr', 'i64', 'i64', 'i32'] as const;
  const packed = packStruct(types.map((type) => ({ type, value: 0 })));
  return { ...packed, arg: { type: 'bytes', bytes: packed.bytes } as const };
})();

/** The kernel's function, per device, looked up once per settings (loadKernels keys it by spec each call). */
const kernels = new Map<number, bigint>();
/** The launch group of each device's appends (one executable graph, updated when the parameters change). */
const groups = new Map<number, LaunchGraph>();
let kernelsConfig: unknown = null;

function appendGroup(): LaunchGraph {
  const device = currentDeviceOrdinal();
  let group = groups.get(device);
  if (group === undefined) {
    group = newLaunchGraph(true);
    groups.set(device, group);
  }
  return group;
}

function appendKernel(): bigint {
  if (config() !== kernelsConfig) {
    kernels.clear();
    for (const group of groups.values()) forgetLaunchGraph(group);
    groups.clear();
    kernelsConfig = config();
  }
  const device = currentDeviceOrdinal();
  let fn = kernels.get(device);
  if (fn === undefined) {
    fn = loadKernels({ file: 'ops/kv_append.cu', kernels: [NAME], defines: {} }).functions.get(NAME)!;
    kernels.set(device, fn);
  }
  return fn;
}
