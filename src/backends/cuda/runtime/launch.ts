/**
 * The one place that marshals kernel arguments and calls cuLaunchKernel.
 *
 * cuLaunchKernel takes `void **params`: for each argument the address of its value. The values live
 * in an arena allocated once with koffi.alloc (native memory that never moves, unlike a JS typed
 * array) and the address table beside it; both are rewritten for every launch, which is safe because
 * cuLaunchKernel copies the argument values before it returns.
 *
 * An argument is a scalar or a struct passed by value. A struct is laid out here with C's rules
 * (each field at a multiple of its size, the total a multiple of the largest), so a kernel can take
 * one parameter struct, as FlashAttention's `Flash_fwd_params`, with its layout defined twice only:
 * in the .cu and in the field list that builds it.
 */
import koffi from 'koffi';
import { InvalidArgumentError } from '../../../errors.js';
import { CU_FUNC_ATTRIBUTE, cu, outInt } from '../ffi/driver.js';
import { getCudaContext } from './context.js';
import { LAUNCH_ATTRIBUTE_BYTES, LAUNCH_CONFIG_BYTES, writeDependentLaunch } from './launch-dependent.js';

export type ScalarType = 'i32' | 'u32' | 'f32' | 'i64' | 'u64' | 'ptr';
export type KernelArg =
  | { readonly type: ScalarType; readonly value: number | bigint }
  | {
      readonly type: 'struct';
      readonly fields: ReadonlyArray<{ readonly type: ScalarType; readonly value: number | bigint }>;
    }
  /** A struct laid out beforehand (packStruct), copied as is: for launches repeated with few changes. */
  | { readonly type: 'bytes'; readonly bytes: Uint8Array };

export const ptr = (value: bigint): KernelArg => ({ type: 'ptr', value });
export const i32 = (value: number): KernelArg => ({ type: 'i32', value });
export const u32 = (value: number): KernelArg => ({ type: 'u32', value });
export const f32 = (value: number): KernelArg => ({ type: 'f32', value });
export const i64 = (value: number | bigint): KernelArg => ({ type: 'i64', value });

export interface LaunchConfig {
  readonly grid: readonly [number, number, number];
  readonly block: readonly [number, number, number];
  /** Dynamic shared memory in bytes; above 48 KiB the kernel's opt-in limit is raised first. */
  readonly sharedBytes?: number;
  /** Defaults to attnlab's stream. */
  readonly stream?: bigint;
  /**
   * Launch as a programmatic dependent of the work before it on the stream (launch-dependent.ts): only
   * for kernels that run griddepcontrol.wait before reading memory, and only on sm_90 or newer. The caller
   * decides (decode.ts, by decode-tma.ts's tmaDependentLaunches and ATTNLAB_DEPENDENT_LAUNCH, config.ts).
   */
  readonly dependent?: boolean;
}

/** Bytes of each scalar kernel-argument type (C sizeof on the 64-bit targets CUDA supports). */
export const SCALAR_BYTES: Record<ScalarType, number> = { i32: 4, u32: 4, f32: 4, i64: 8, u64: 8, ptr: 8 };
/** Without opting in, a block gets 48 KiB of dynamic shared memory at most. */
const DEFAULT_SHARED_LIMIT = 48 * 1024;
const ARENA_BYTES = 4096;
/** After the argument values: cuLaunchKernelEx's config and its one attribute (launch-dependent.ts). */
const LAUNCH_EX_AT = ARENA_BYTES;
const ALLOC_BYTES = ARENA_BYTES + LAUNCH_CONFIG_BYTES + LAUNCH_ATTRIBUTE_BYTES;
const MAX_ARGS = 64;

interface Arena {
  /** Address of the argument values. */
  readonly base: bigint;
  readonly bytes: DataView;
  /** The same bytes, for copying a laid-out struct in with one set() and no new view per argument. */
  readonly octets: Uint8Array;
  /** The void*[] table, one address per argument; its own address is what cuLaunchKernel receives. */
  readonly table: BigUint64Array;
  readonly tableAddress: bigint;
  /** The koffi allocations themselves, held so that they are never freed. */
  readonly owners: readonly unknown[];
}

let arena: Arena | undefined;
const sharedOptIn = new Map<bigint, number>();

function getArena(): Arena {
  if (arena) return arena;
  const values = koffi.alloc('uint8_t', ALLOC_BYTES);
  const table = koffi.alloc('uint64_t', MAX_ARGS);
  arena = {
    base: toAddress(values),
    bytes: new DataView(koffi.view(values, ALLOC_BYTES)),
    octets: new Uint8Array(koffi.view(values, ALLOC_BYTES)),
    table: new BigUint64Array(koffi.view(table, 8 * MAX_ARGS)),
    tableAddress: toAddress(table),
    owners: [values, table],
  };
  return arena;
}

function toAddress(pointer: unknown): bigint {
  return typeof pointer === 'bigint' ? pointer : koffi.address(pointer);
}

/** Byte layout of a struct argument: offsets of its fields and its size, by C's rules. */
export function structLayout(fields: ReadonlyArray<{ type: ScalarType }>): {
  offsets: number[];
  size: number;
  align: number;
} {
  let offset = 0;
  let align = 1;
  const offsets = fields.map(({ type }) => {
    const size = SCALAR_BYTES[type];
    align = Math.max(align, size);
    offset = Math.ceil(offset / size) * size;
    const at = offset;
    offset += size;
    return at;
  });
  return { offsets, size: Math.ceil(offset / align) * align, align };
}

/**
 * A struct's fields laid out once into bytes (C's rules, as launchKernel lays out a 'struct'), with
 * each field's offset, so that a caller can rewrite a few fields (pointers) and launch the bytes.
 */
export function packStruct(
  fields: ReadonlyArray<{ readonly type: ScalarType; readonly value: number | bigint }>,
): {
  bytes: Uint8Array;
  view: DataView;
  offsets: number[];
} {
  const layout = structLayout(fields);
  const bytes = new Uint8Array(layout.size);
  const view = new DataView(bytes.buffer);
  fields.forEach((field, i) => {
    writeScalar(view, layout.offsets[i], field.type, field.value);
  });
  return { bytes, view, offsets: layout.offsets };
}

function writeScalar(view: DataView, at: number, type: ScalarType, value: number | bigint): void {
  switch (type) {
    case 'i32':
      view.setInt32(at, Number(value), true);
      return;
    case 'u32':
      view.setUint32(at, Number(value), true);
      return;
    case 'f32':
      view.setFloat32(at, Number(value), true);
      return;
    case 'i64':
      view.setBigInt64(at, BigInt(value), true);
      return;
    default:
      view.setBigUint64(at, BigInt(value), true);
  }
}

/** Marshals `args` and enqueues `fn` on the stream; throws DeviceError (with the call) on failure. */
export function launchKernel(fn: bigint, config: LaunchConfig, args: readonly KernelArg[]): void {
  const { base, bytes, octets, table, tableAddress } = getArena();
  if (args.length > MAX_ARGS)
    throw new InvalidArgumentError('args', `at most ${MAX_ARGS} kernel arguments`, String(args.length));
  let offset = 0;
  for (let index = 0; index < args.length; index++) {
    const arg = args[index];
    if (arg.type === 'bytes') {
      offset = Math.ceil(offset / 16) * 16;
      if (offset + arg.bytes.byteLength > ARENA_BYTES)
        throw new InvalidArgumentError('args', `at most ${ARENA_BYTES} bytes`, 'more');
      octets.set(arg.bytes, offset);
      // A call's one packed argument sits at the arena's start: its address needs no bigint sum.
      table[index] = offset === 0 ? base : base + BigInt(offset);
      offset += arg.bytes.byteLength;
    } else if (arg.type === 'struct') {
      const layout = structLayout(arg.fields);
      offset = Math.ceil(offset / 16) * 16;
      if (offset + layout.size > ARENA_BYTES)
        throw new InvalidArgumentError('args', `at most ${ARENA_BYTES} bytes`, 'more');
      arg.fields.forEach((field, i) => {
        writeScalar(bytes, offset + layout.offsets[i], field.type, field.value);
      });
      table[index] = base + BigInt(offset);
      offset += layout.size;
    } else {
      offset = Math.ceil(offset / 8) * 8;
      writeScalar(bytes, offset, arg.type, arg.value);
      table[index] = base + BigInt(offset);
      offset += 8;
    }
  }
  const shared = config.sharedBytes ?? 0;
  if (shared > DEFAULT_SHARED_LIMIT && (sharedOptIn.get(fn) ?? 0) < shared) {
    cu().cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE.MAX_DYNAMIC_SHARED_SIZE_BYTES, shared);
    // A kernel that opts into more than 48 KiB wants the SM's shared memory, not L1: ask for the
    // whole carveout, so that as many blocks as the registers allow can share an SM.
    cu().cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE.PREFERRED_SHARED_MEMORY_CARVEOUT, 100);
    sharedOptIn.set(fn, shared);
  }
  const stream = config.stream ?? getCudaContext().stream;
  const [gx, gy, gz] = config.grid;
  const [bx, by, bz] = config.block;
  if (config.dependent) {
    const launch = writeDependentLaunch(bytes, LAUNCH_EX_AT, base, {
      grid: config.grid,
      block: config.block,
      sharedBytes: shared,
      stream,
    });
    cu().cuLaunchKernelEx(launch, fn, tableAddress, null);
    return;
  }
  cu().cuLaunchKernel(fn, gx, gy, gz, bx, by, bz, shared, stream, tableAddress, null);
}

/** Registers, local (spill) bytes and the largest block a compiled kernel allows. */
export function kernelAttributes(fn: bigint): {
  registers: number;
  localBytes: number;
  maxThreadsPerBlock: number;
} {
  const d = cu();
  const get = (attribute: number) => outInt((slot) => d.cuFuncGetAttribute(slot, attribute, fn));
  return {
    registers: get(CU_FUNC_ATTRIBUTE.NUM_REGS),
    localBytes: get(CU_FUNC_ATTRIBUTE.LOCAL_SIZE_BYTES),
    maxThreadsPerBlock: get(CU_FUNC_ATTRIBUTE.MAX_THREADS_PER_BLOCK),
  };
}
