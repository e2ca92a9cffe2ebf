/**
 * The backward kernels' second parameter struct (src/kernels/flash/bwd_params.cuh, FlashBwdParams),
 * written in one place; the first is the forward's FlashParams (params.ts) over Q, K, V, O and the
 * forward's log-sum-exp. test/kernels/kernel-params-layout.test.ts holds it to the compiler's layout.
 */
import { type KernelArg, type ScalarType, structLayout } from '../../runtime/launch.js';

export interface FlashBwdPointers {
  readonly dOutput: bigint;
  readonly lse2: bigint;
  readonly dsum: bigint;
  /** 0n in the deterministic pass (dQ is written by its own kernel). */
  readonly dqAccum: bigint;
  readonly dQuery: bigint;
  readonly dKey: bigint;
  readonly dValue: bigint;
  /** The float32 output D is taken from, or 0n: D from the 16-bit output (FlashParams' o). */
  readonly outputFloat32: bigint;
  /** The float32 dBias accumulator (the bias's layout), or 0n without a bias. */
  readonly dBias: bigint;
}

/** FlashBwdParams, field for field in declaration order (8-byte fields, then 4-byte ones). */
export function marshalFlashBwdParams(pointers: FlashBwdPointers, scale: number, tPad: number): KernelArg {
  const { dOutput, lse2, dsum, dqAccum, dQuery, dKey, dValue, outputFloat32, dBias } = pointers;
  const fields: Array<{ type: ScalarType; value: number | bigint }> = [
    ...[dOutput, lse2, dsum, dqAccum, dQuery, dKey, dValue, outputFloat32, dBias].map((value) => ({
      type: 'ptr' as const,
      value,
    })),
    { type: 'f32', value: scale },
    { type: 'i32', value: tPad },
  ];
  return { type: 'struct', fields };
}

/** marshalFlashBwdParams' layout: 9 pointers, then the scale and t_pad. */
const FLASH_BWD_PARAMS_LAYOUT = structLayout([
  ...Array.from({ length: 9 }, () => ({ type: 'ptr' as const })),
  { type: 'f32' },
  { type: 'i32' },
]);

/** Bytes of the packed FlashBwdParams (packFlashBwdParams). */
export const FLASH_BWD_PARAMS_BYTES = FLASH_BWD_PARAMS_LAYOUT.size;

/** marshalFlashBwdParams' struct written straight into `view` at byte `at` (packStruct's bytes of it). */
export function packFlashBwdParams(
  pointers: FlashBwdPointers,
  scale: number,
  tPad: number,
  view: DataView,
  at: number,
): void {
  const o = FLASH_BWD_PARAMS_LAYOUT.offsets;
  view.setBigUint64(at + o[0], pointers.dOutput, true);
  view.setBigUint64(at + o[1], pointers.lse2, true);
  view.setBigUint64(at + o[2], pointers.dsum, true);
  view.setBigUint64(at + o[3], pointers.dqAccum, true);
  view.setBigUint64(at + o[4], pointers.dQuery, true);
  view.setBigUint64(at + o[5], pointers.dKey, true);
  view.setBigUint64(at + o[6], pointers.dValue, true);
  view.setBigUint64(at + o[7], pointers.outputFloat32, true);
  view.setBigUint64(at + o[8], pointers.dBias, true);
  view.setFloat32(at + o[9], scale, true);
  view.setInt32(at + o[10], tPad, true);
}
