/**
 * The flash backend's Hopper path: runs a problem that hopperVariant() accepts on the wgmma + TMA
 * kernel (src/kernels/hopper/hopper_fwd.cu), one launch per call.
 *
 * The kernel takes HopperParams by value (__grid_constant__): three CUtensorMaps (Q, K, V: 4-D,
 * head dim innermost, boxes of 64 columns) and then FlashParams unchanged, so the scheduling and
 * masking rules are the mma.sync kernel's own; the dynamic persistent grid also reads a work
 * counter, one int per device kept here and zeroed on the stream before each of its launches.
 */
import { AttnlabError } from '../../../../errors.js';
import type { DeviceBuffer } from '../../../../tensor/storage.js';
import type { AttentionProblem } from '../../../problem.js';
import { cachedTiledMap } from '../../ffi/tensor-map.js';
import { loadKernels } from '../../runtime/compile.js';
import { currentDeviceOrdinal, getCudaContext } from '../../runtime/context.js';
import { type KernelArg, launchKernel, type ScalarType, structLayout } from '../../runtime/launch.js';
import { allocDevice, fillDevice32 } from '../../runtime/memory.js';
import { blockMaskOf, kernelPrelude, marshalBlockMask, marshalCaptures, modifiersOf } from '../modifiers.js';
import { buildFlashParams, type FlashPointers, marshalFlashParams } from '../params.js';
import {
  HOPPER_KERNEL,
  type HopperVariant,
  hopperBlockM,
  hopperBlockMaskBytes,
  hopperDefines,
  hopperGrid,
  hopperSharedBytes,
  hopperThreads,
} from './hopper-variant.js';

/** sizeof(HopperParams): 3 maps of 128 bytes, FlashParams (280), padded to the maps' 64-byte alignment. */
export const HOPPER_PARAMS_BYTES = 704;

/**
 * The three tensor maps of `p` for `v`: (dim, rows, heads, batch) with byte strides of a row, a
 * head and a batch (the layouts buildFlashParams states), boxes of 64 × rows × 1 × 1 (Q: the block's
 * query rows, K and V: BN keys).
 */
export function hopperTensorMaps(p: AttentionProblem, v: HopperVariant, q: bigint, k: bigint, val: bigint) {
  const map = (address: bigint, rows: number, heads: number, dim: number, boxRows: number) =>
    cachedTiledMap({
      dtype: v.dtype,
      address,
      dims: [dim, rows, heads, p.B],
      byteStrides: [heads * dim * 2, dim * 2, rows * heads * dim * 2],
      box: [64, boxRows, 1, 1],
    });
  return [
    map(q, p.T, p.N, p.H, hopperBlockM(v)),
    map(k, p.S, p.K, p.H, v.blockN),
    map(val, p.S, p.K, p.Hv, v.blockN),
  ] as const;
}

/**
 * HopperParams as a struct argument: the maps' words, FlashParams' fields, then the tail: the
 * dynamic grid's work counter (byte 664, 0 = none), its section override (0: the kernel's rule), padding.
 */
export function marshalHopperParams(
  maps: readonly BigUint64Array[],
  flash: KernelArg,
  workCounter = 0n,
): KernelArg {
  if (flash.type !== 'struct') throw new AttnlabError('HopperParams: FlashParams must be a struct');
  const words = maps.flatMap((m) => Array.from(m, (value) => ({ type: 'u64' as ScalarType, value })));
  const fields = [...words, ...flash.fields, { type: 'u64' as ScalarType, value: workCounter }];
  const unpadded = structLayout(fields).size;
  for (let size = unpadded; size < HOPPER_PARAMS_BYTES; size += 8) fields.push({ type: 'u64', value: 0n });
  const { size } = structLayout(fields);
  if (size !== HOPPER_PARAMS_BYTES)
    throw new AttnlabError(
      `HopperParams: ${size} bytes marshalled, the kernel expects ${HOPPER_PARAMS_BYTES}`,
    );
  return { type: 'struct', fields };
}

/** One int per device, never released: a launch finds it zeroed by the memset enqueued before it. */
const workCounters = new Map<number, DeviceBuffer>();

/** The device's work counter, zeroed on the stream (ordered before the next launch, after the last). */
export function zeroedWorkCounter(): bigint {
  const device = currentDeviceOrdinal();
  let counter = workCounters.get(device);
  if (!counter) {
    counter = allocDevice(4);
    workCounters.set(device, counter);
  }
  fillDevice32(counter, 0, 1);
  return counter.ptr;
}

/** Enqueues the Hopper kernel on `p`; the caller owns the output buffers in `pointers`. */
export function launchHopper(p: AttentionProblem, v: HopperVariant, pointers: FlashPointers): void {
  const module = loadKernels({
    file: HOPPER_KERNEL.file,
    kernels: [HOPPER_KERNEL.name],
    defines: hopperDefines(v),
    prelude: kernelPrelude(v.modifiers),
  });
  const fn = module.functions.get(HOPPER_KERNEL.name)!;
  const maps = hopperTensorMaps(p, v, pointers.q, pointers.k, pointers.v);
  const counter = v.persistent === 'dynamic' ? zeroedWorkCounter() : 0n;
  const params = marshalHopperParams(maps, marshalFlashParams(buildFlashParams(p, pointers)), counter);
  launchKernel(
    fn,
    {
      // x: query blocks (visited last-first), y: batch × head, as the mma.sync kernel (schedule.cuh);
      // or one block per SM in x on the dynamic grid (hopper_fwd.cu run_dynamic).
      grid: hopperGrid(v, p.T, p.B * p.N, getCudaContext().properties.multiprocessorCount),
      block: [hopperThreads(v), 1, 1],
      // The tiles, the barriers, and with a block mask its tile bitmaps for S keys.
      sharedBytes: hopperSharedBytes(v) + hopperBlockMaskBytes(v, p.S),
    },
    // With modifiers or a block mask the kernel takes AttnlabCaptures and AttnlabBlockMask after
    // HopperParams (hopper_fwd.cu), each by value.
    v.modifiers || v.blockMask
      ? [params, marshalCaptures(modifiersOf(p)), marshalBlockMask(blockMaskOf(p), p.T, p.S)]
      : [params],
  );
}
