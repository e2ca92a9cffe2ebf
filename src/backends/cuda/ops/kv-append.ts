/**
 * The launcher of src/kernels/ops/kv_append.cu: new K and V rows scattered into a paged cache's
 * pools in one launch (KVCache's append on the GPU).
 */
import { config } from '../../../config.js';
import { loadKernels } from '../runtime/compile.js';
import { currentDeviceOrdinal } from '../runtime/context.js';
import { launchKernel, packStruct } from '../runtime/launch.js';
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
  const fn = appendKernel();
  const slotBuffer = copyInt32ToDevice(slots);
  try {
    const chunks = (slots.length * Math.max(operands.keyRow, operands.valueRow)) / 8;
    // AppendParams (kv_append.cu), laid out once and rewritten in place: a struct of 8 field objects a call
    // costs more than the launch's own marshalling.
    const { view, offsets } = PARAMS;
    view.setBigUint64(offsets[0], operands.key, true);
    view.setBigUint64(offsets[1], operands.value, true);
    view.setBigUint64(offsets[2], operands.keyPool, true);
    view.setBigUint64(offsets[3], operands.valuePool, true);
    view.setBigUint64(offsets[4], slotBuffer.ptr, true);
    view.setBigInt64(offsets[5], BigInt(operands.keyRow), true);
    view.setBigInt64(offsets[6], BigInt(operands.valueRow), true);
    view.setInt32(offsets[7], slots.length, true);
    launchKernel(fn, { grid: [Math.min(Math.ceil(chunks / 256), 1024), 2, 1], block: [256, 1, 1] }, [
      PARAMS.arg,
    ]);
  } finally {
    slotBuffer.release(); // stream-ordered: only later work on the stream gets the block again
  }
}

/** AppendParams' fields in declaration order: src[2], pool[2], slots, row[2], rows. */
const PARAMS = (() => {
  const types = ['ptr', 'ptr', 'ptr', 'ptr', 'ptr', 'i64', 'i64', 'i32'] as const;
  const packed = packStruct(types.map((type) => ({ type, value: 0 })));
  return { ...packed, arg: { type: 'bytes', bytes: packed.bytes } as const };
})();

/** The kernel's function, per device, looked up once per settings (loadKernels keys it by spec each call). */
const kernels = new Map<number, bigint>();
let kernelsConfig: unknown = null;

function appendKernel(): bigint {
  if (config() !== kernelsConfig) {
    kernels.clear();
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
