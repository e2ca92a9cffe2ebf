/**
 * The flash kernel's launch parameters: built from the problem in one function, written to the C
 * struct layout (src/kernels/flash/params.cuh, FlashParams) in one other. Strides are explicit, in
 * elements, so the kernel never assumes a layout the problem did not state.
 */
import type { AttentionProblem } from '../../problem.js';
import { type KernelArg, type ScalarType, structLayout } from '../runtime/launch.js';

/** FLASH_FLAG_* in params.cuh. */
export const FLASH_FLAGS = { causal: 1, bottomRight: 2, window: 4 } as const;

/** "Unbounded" window side: far past any length, yet i + diag ± it cannot overflow an int32. */
const WINDOW_UNBOUNDED = 1 << 29;

type Strides3 = readonly [number, number, number];
type Strides4 = readonly [number, number, number, number];

/** Device addresses the kernel reads and writes (0n for an absent operand). */
export interface FlashPointers {
  readonly q: bigint;
  readonly k: bigint;
  readonly v: bigint;
  readonly o: bigint;
  readonly lse: bigint;
  readonly bias: bigint;
  readonly mask: bigint;
  readonly qLens: bigint;
  readonly kvLens: bigint;
}

/** FlashParams, field for field. */
export interface FlashParams {
  readonly pointers: FlashPointers;
  /** Element strides (batch, row, head) of Q, K, V and O. */
  readonly q: Strides3;
  readonly k: Strides3;
  readonly v: Strides3;
  readonly o: Strides3;
  /** Element strides of bias and mask over (b, n, t, s), 0 on broadcast dims. */
  readonly bias: Strides4;
  readonly mask: Strides4;
  readonly sizes: { B: number; T: number; S: number; N: number; K: number; H: number; Hv: number };
  readonly group: number;
  readonly windowLeft: number;
  readonly windowRight: number;
  readonly scaleLog2: number;
  readonly flags: number;
}

/** The parameters for `p`, with the caller's device addresses for the operands. */
export function buildFlashParams(p: AttentionProblem, pointers: FlashPointers): FlashParams {
  const { B, T, S, N, K, H, Hv } = p;
  let flags = 0;
  if (p.causal) flags |= FLASH_FLAGS.causal;
  if (p.alignment === 'bottom_right') flags |= FLASH_FLAGS.bottomRight;
  if (p.window) flags |= FLASH_FLAGS.window;
  const side = (x: number) => (Number.isFinite(x) ? Math.min(x, WINDOW_UNBOUNDED) : WINDOW_UNBOUNDED);
  return {
    pointers,
    q: [T * N * H, N * H, H],
    k: [S * K * H, K * H, H],
    v: [S * K * Hv, K * Hv, Hv],
    o: [T * N * Hv, N * Hv, Hv],
    bias: p.bias ? p.bias.strides : [0, 0, 0, 0],
    mask: p.mask ? p.mask.strides : [0, 0, 0, 0],
    sizes: { B, T, S, N, K, H, Hv },
    group: N / K,
    windowLeft: p.window ? side(p.window.left) : WINDOW_UNBOUNDED,
    windowRight: p.window ? side(p.window.right) : WINDOW_UNBOUNDED,
    scaleLog2: p.scale * Math.LOG2E,
    flags,
  };
}

/**
 * The struct argument for launchKernel, fields in declaration order; the only place that knows the
 * C layout (launch.ts places each field at C's natural alignment, which here is a running sum).
 * test/kernels/kernel-params-layout.test.ts holds it to the compiler's layout of params.cuh.
 */
export function marshalFlashParams(f: FlashParams): KernelArg {
  const { q, k, v, o, lse, bias, mask, qLens, kvLens } = f.pointers;
  const { B, T, S, N, K, H, Hv } = f.sizes;
  const fields: Array<{ type: ScalarType; value: number | bigint }> = [
    ...[q, k, v, o, lse, bias, mask, qLens, kvLens].map((value) => ({ type: 'ptr' as const, value })),
    ...[f.q, f.k, f.v, f.o, f.bias, f.mask].flat().map((value) => ({ type: 'i64' as const, value })),
    ...[B, T, S, N, K, H, Hv, f.group, f.windowLeft, f.windowRight].map((value) => ({
      type: 'i32' as const,
      value,
    })),
    { type: 'f32', value: f.scaleLog2 },
    { type: 'i32', value: f.flags },
  ];
  return { type: 'struct', fields };
}

/** marshalFlashParams' field types in order: its layout, worked out once for packFlashParams. */
const FLASH_PARAMS_LAYOUT = structLayout([
  ...Array.from({ length: 9 }, () => ({ type: 'ptr' as const })),
  ...Array.from({ length: 20 }, () => ({ type: 'i64' as const })),
  ...Array.from({ length: 10 }, () => ({ type: 'i32' as const })),
  { type: 'f32' },
  { type: 'i32' },
]);

/** Bytes of the packed FlashParams (packFlashParams). */
export const FLASH_PARAMS_BYTES = FLASH_PARAMS_LAYOUT.size;

/**
 * marshalFlashParams' struct written straight into `view` at byte `at` (the bytes launch.ts's packStruct
 * makes of it; test/unit/backends/cuda/flash/params-pack.test.ts holds them equal): no field list, for
 * a call that launches several kernels over the same parameters (the backward).
 */
export function packFlashParams(f: FlashParams, view: DataView, at: number): void {
  const o = FLASH_PARAMS_LAYOUT.offsets;
  const p = f.pointers;
  view.setBigUint64(at + o[0], p.q, true);
  view.setBigUint64(at + o[1], p.k, true);
  view.setBigUint64(at + o[2], p.v, true);
  view.setBigUint64(at + o[3], p.o, true);
  view.setBigUint64(at + o[4], p.lse, true);
  view.setBigUint64(at + o[5], p.bias, true);
  view.setBigUint64(at + o[6], p.mask, true);
  view.setBigUint64(at + o[7], p.qLens, true);
  view.setBigUint64(at + o[8], p.kvLens, true);
  let i = 9;
  for (const strides of [f.q, f.k, f.v, f.o])
    for (let j = 0; j < 3; j++) view.setBigInt64(at + o[i++], BigInt(strides[j]), true);
  for (const strides of [f.bias, f.mask])
    for (let j = 0; j < 4; j++) view.setBigInt64(at + o[i++], BigInt(strides[j]), true);
  const { B, T, S, N, K, H, Hv } = f.sizes;
  view.setInt32(at + o[i++], B, true);
  view.setInt32(at + o[i++], T, true);
  view.setInt32(at + o[i++], S, true);
  view.setInt32(at + o[i++], N, true);
  view.setInt32(at + o[i++], K, true);
  view.setInt32(at + o[i++], H, true);
  view.setInt32(at + o[i++], Hv, true);
  view.setInt32(at + o[i++], f.group, true);
  view.setInt32(at + o[i++], f.windowLeft, true);
  view.setInt32(at + o[i++], f.windowRight, true);
  view.setFloat32(at + o[i++], f.scaleLog2, true);
  view.setInt32(at + o[i], f.flags, true);
}
