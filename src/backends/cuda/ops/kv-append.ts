/**
 * The launcher of src/kernels/ops/kv_append.cu: new K and V rows scattered into a paged cache's
 * pools in one launch (KVCache's append on the GPU).
 */
import { loadKernels } from '../runtime/compile.js';
import { launchKernel } from '../runtime/launch.js';
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
  const fn = loadKernels({ file: 'ops/kv_append.cu', kernels: [NAME], defines: {} }).functions.get(NAME)!;
  const slotBuffer = copyInt32ToDevice(slots);
  try {
    const chunks = (slots.length * Math.max(operands.keyRow, operands.valueRow)) / 8;
    launchKernel(fn, { grid: [Math.min(Math.ceil(chunks / 256), 1024), 2, 1], block: [256, 1, 1] }, [
      {
        type: 'struct',
        fields: [
          { type: 'ptr', value: operands.key },
          { type: 'ptr', value: operands.value },
          { type: 'ptr', value: operands.keyPool },
          { type: 'ptr', value: operands.valuePool },
          { type: 'ptr', value: slotBuffer.ptr },
          { type: 'i64', value: operands.keyRow },
          { type: 'i64', value: operands.valueRow },
          { type: 'i32', value: slots.length },
        ],
      },
    ]);
  } finally {
    slotBuffer.release(); // stream-ordered: only later work on the stream gets the block again
  }
}
