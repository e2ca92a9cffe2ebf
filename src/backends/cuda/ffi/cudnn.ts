/**
 * cuDNN's backend API (cudnn_graph.h) through koffi: descriptors, attributes, finalize, execute.
 *
 * Every call goes through `check`, so a failure throws DeviceError with the status name, the
 * library's own last-error text (cudnnGetLastErrorString: "xDesc.getNbDims() != bDesc.getNbDims()"
 * says far more than the status) and the call. Marshalling follows what was verified on the H200:
 * descriptors and pointers are BigInt, out-parameters
 * are one-element typed arrays, and each attribute type has its own typed value array.
 */

import { writeSync } from 'node:fs';
import koffi, { type LibraryHandle } from 'koffi';
import { config } from '../../../config.js';
import { DeviceError } from '../../../errors.js';
import { currentDeviceOrdinal, getCudaContext } from '../runtime/context.js';
import { ATTR_TYPE, DESCRIPTOR, statusCategory } from './cudnn-constants.js';
import { loadLibrary } from './libraries.js';

const PROTOTYPES = {
  cudnnCreate: 'int cudnnCreate(void *handle)',
  cudnnSetStream: 'int cudnnSetStream(void *handle, void *stream)',
  cudnnBackendCreateDescriptor: 'int cudnnBackendCreateDescriptor(int type, void *descriptor)',
  cudnnBackendDestroyDescriptor: 'int cudnnBackendDestroyDescriptor(void *descriptor)',
  cudnnBackendSetAttribute:
    'int cudnnBackendSetAttribute(void *descriptor, int name, int type, int64_t count, const void *values)',
  cudnnBackendGetAttribute:
    'int cudnnBackendGetAttribute(void *descriptor, int name, int type, int64_t requested, void *count, void *values)',
  cudnnBackendFinalize: 'int cudnnBackendFinalize(void *descriptor)',
  cudnnBackendExecute: 'int cudnnBackendExecute(void *handle, void *plan, void *variantPack)',
} as const;

/** cuDNN ≥ 9.5's CUDA-graph route (cudnn_graph.h): a plan + variant pack written into a driver CUgraph. */
const GRAPH_PROTOTYPES = {
  cudnnBackendPopulateCudaGraph:
    'int cudnnBackendPopulateCudaGraph(void *handle, void *plan, void *variantPack, void *graph)',
  cudnnBackendUpdateCudaGraph:
    'int cudnnBackendUpdateCudaGraph(void *handle, void *plan, void *variantPack, void *graph)',
} as const;
/** The first cuDNN that exports GRAPH_PROTOTYPES (9.5.0). */
const CUDA_GRAPH_VERSION = 90500;

type Fn = (...args: unknown[]) => number;

/** The loaded library: its version (e.g. 91900 for 9.19.0), where it came from, and the calls. */
export interface Cudnn {
  readonly version: number;
  readonly path: string;
  /** "9.19.0 (/opt/.../libcudnn.so.9)", for results and `attnlab info`. */
  readonly description: string;
  readonly fn: { readonly [K in keyof typeof PROTOTYPES]: Fn };
  /** The CUDA-graph entry points, or null where this cuDNN (before 9.5) has none. */
  readonly graphFn: { readonly [K in keyof typeof GRAPH_PROTOTYPES]: Fn } | null;
  /** The last error text cuDNN recorded (empty when none). */
  lastError(): string;
  statusName(status: number): string;
}

let cudnn: Cudnn | undefined;
/** One handle per device ordinal (cudnnCreate binds the context current at the time). */
const handles = new Map<number, bigint>();

/** Loads cuDNN once (the newest copy found, see libraries.ts). Throws LibraryNotFoundError. */
export function loadCudnn(): Cudnn {
  if (cudnn) return cudnn;
  // libraries.ts preloads cuDNN's sub-libraries from the chosen copy's folder and keeps their handles.
  const { lib, path } = loadLibrary('cudnn');
  const version = Number(lib.func('size_t cudnnGetVersion()')());
  const errorString = lib.func('const char *cudnnGetErrorString(int status)');
  const lastErrorString = lib.func('void cudnnGetLastErrorString(void *message, size_t max)');
  const fn = Object.fromEntries(
    Object.entries(PROTOTYPES).map(([name, prototype]) => [
      name,
      traced(name, lib.func(prototype) as unknown as Fn),
    ]),
  ) as Cudnn['fn'];
  const graphFn = version >= CUDA_GRAPH_VERSION ? bindOptional(lib, GRAPH_PROTOTYPES) : null;
  const text = Buffer.alloc(2048);
  cudnn = {
    version,
    path,
    description: `${Math.floor(version / 10000)}.${Math.floor(version / 100) % 100}.${version % 100} (${path})`,
    fn,
    graphFn,
    lastError() {
      text.fill(0);
      lastErrorString(text, text.length);
      const end = text.indexOf(0);
      return text.toString('utf8', 0, end < 0 ? text.length : end).trim();
    },
    statusName(status: number) {
      return (errorString(status) as string | null) ?? statusCategory(status);
    },
  };
  return cudnn;
}

/** Binds every prototype of `prototypes`, or returns null if the library lacks any of them. */
function bindOptional<P extends Record<string, string>>(
  lib: LibraryHandle,
  prototypes: P,
): { readonly [K in keyof P]: Fn } | null {
  try {
    return Object.fromEntries(
      Object.entries(prototypes).map(([name, prototype]) => [
        name,
        traced(name, lib.func(prototype) as unknown as Fn),
      ]),
    ) as { readonly [K in keyof P]: Fn };
  } catch {
    return null; // a build without the symbols: the caller keeps to cudnnBackendExecute
  }
}

/**
 * ATTNLAB_CUDNN_TRACE=1 prints every backend call and its status to stderr, written synchronously
 * so that the last call before a crash inside cuDNN is on screen.
 */
function traced(name: string, fn: Fn): Fn {
  if (!config().cudnnTrace) return fn;
  const show = (a: unknown) =>
    typeof a === 'bigint'
      ? `0x${a.toString(16)}`
      : ArrayBuffer.isView(a)
        ? `${a.constructor.name}[${(a as Uint8Array).length}]`
        : String(a);
  return (...args: unknown[]) => {
    writeSync(2, `cudnn> ${name}(${args.map(show).join(', ')})\n`);
    const status = fn(...args);
    writeSync(2, `cudnn< ${status}\n`);
    return status;
  };
}

/** Runs a cuDNN call and throws DeviceError (status name, cuDNN's reason, the call) unless it succeeded. */
/** `call` may be a function, so that naming the call costs nothing unless it failed. */
export function check(call: string | (() => string), status: number): void {
  if (status === 0) return;
  const lib = loadCudnn();
  throw new DeviceError(
    'cuDNN',
    typeof call === 'string' ? call : call(),
    lib.statusName(status),
    lib.lastError(),
  );
}

/**
 * The cuDNN handle, created once in attnlab's CUDA context and bound to attnlab's stream, so that
 * cuDNN work is ordered with every other backend's (cudnnCreate picks up the current context, which
 * context.ts made the device's primary one).
 */
export function cudnnHandle(): bigint {
  const device = currentDeviceOrdinal();
  const known = handles.get(device);
  if (known !== undefined) return known;
  const { stream } = getCudaContext();
  const lib = loadCudnn();
  const out = new BigUint64Array(1);
  check('cudnnCreate', lib.fn.cudnnCreate(out));
  check('cudnnSetStream', lib.fn.cudnnSetStream(out[0], stream));
  handles.set(device, out[0]);
  return out[0];
}

/** A value array of one attribute type, as cuDNN reads it (it copies the array during the call). */
export type AttributeValues =
  | BigUint64Array
  | BigInt64Array
  | Int32Array
  | Uint8Array
  | Float32Array
  | Buffer;

export function createDescriptor(type: number): bigint {
  const out = new BigUint64Array(1);
  check(
    () => `cudnnBackendCreateDescriptor(${descriptorName(type)})`,
    loadCudnn().fn.cudnnBackendCreateDescriptor(type, out),
  );
  return out[0];
}

export function destroyDescriptor(descriptor: bigint): void {
  check('cudnnBackendDestroyDescriptor', loadCudnn().fn.cudnnBackendDestroyDescriptor(descriptor));
}

export function setAttribute(descriptor: bigint, name: number, type: number, values: AttributeValues): void {
  const count = values instanceof Buffer ? values.byteLength : values.length;
  check(
    () => `cudnnBackendSetAttribute(attribute ${name})`,
    loadCudnn().fn.cudnnBackendSetAttribute(descriptor, name, type, count, values),
  );
}

/** Shorthands for the attribute types the graph builder uses. */
export const set = {
  descriptors: (d: bigint, name: number, values: readonly bigint[]) =>
    setAttribute(d, name, ATTR_TYPE.BACKEND_DESCRIPTOR, BigUint64Array.from(values)),
  int64: (d: bigint, name: number, values: readonly number[]) =>
    setAttribute(d, name, ATTR_TYPE.INT64, BigInt64Array.from(values, BigInt)),
  /** Enum-typed attributes (DATA_TYPE, POINTWISE_MODE, HEUR_MODE…) are C ints. */
  enumValue: (d: bigint, name: number, type: number, value: number) =>
    setAttribute(d, name, type, Int32Array.of(value)),
  boolean: (d: bigint, name: number, value: boolean) =>
    setAttribute(d, name, ATTR_TYPE.BOOLEAN, Uint8Array.of(value ? 1 : 0)),
  float: (d: bigint, name: number, value: number) =>
    setAttribute(d, name, ATTR_TYPE.FLOAT, Float32Array.of(value)),
  handle: (d: bigint, name: number, value: bigint) =>
    setAttribute(d, name, ATTR_TYPE.HANDLE, BigUint64Array.of(value)),
};

export function finalize(descriptor: bigint, what: string): void {
  check(() => `cudnnBackendFinalize(${what})`, loadCudnn().fn.cudnnBackendFinalize(descriptor));
}

/** Reads one INT64 attribute (a workspace size, an engine index). */
export function getInt64(descriptor: bigint, name: number): number {
  const count = new BigInt64Array(1);
  const value = new BigInt64Array(1);
  check(
    `cudnnBackendGetAttribute(attribute ${name})`,
    loadCudnn().fn.cudnnBackendGetAttribute(descriptor, name, ATTR_TYPE.INT64, 1, count, value),
  );
  return Number(value[0]);
}

/** Reads a CHAR attribute of unknown length: asks for the length first (plans are 60–90 KB). */
export function getString(descriptor: bigint, name: number): string {
  const lib = loadCudnn();
  const count = new BigInt64Array(1);
  check(
    `cudnnBackendGetAttribute(attribute ${name}, size)`,
    lib.fn.cudnnBackendGetAttribute(descriptor, name, ATTR_TYPE.CHAR, 0, count, null),
  );
  const bytes = Buffer.alloc(Number(count[0]));
  check(
    `cudnnBackendGetAttribute(attribute ${name})`,
    lib.fn.cudnnBackendGetAttribute(descriptor, name, ATTR_TYPE.CHAR, bytes.length, count, bytes),
  );
  const end = bytes.indexOf(0);
  return bytes.toString('utf8', 0, end < 0 ? Number(count[0]) : end);
}

/**
 * Reads an array of BACKEND_DESCRIPTOR values into descriptors the caller created (cuDNN fills
 * them, it does not allocate): returns how many it filled.
 */
export function getDescriptors(descriptor: bigint, name: number, into: readonly bigint[]): number {
  const count = new BigInt64Array(1);
  const values = BigUint64Array.from(into);
  check(
    `cudnnBackendGetAttribute(attribute ${name})`,
    loadCudnn().fn.cudnnBackendGetAttribute(
      descriptor,
      name,
      ATTR_TYPE.BACKEND_DESCRIPTOR,
      into.length,
      count,
      values,
    ),
  );
  return Number(count[0]);
}

/** How many results a BACKEND_DESCRIPTOR array attribute holds (an upper bound for heuristics). */
export function countDescriptors(descriptor: bigint, name: number): number {
  const count = new BigInt64Array(1);
  check(
    `cudnnBackendGetAttribute(attribute ${name}, count)`,
    loadCudnn().fn.cudnnBackendGetAttribute(descriptor, name, ATTR_TYPE.BACKEND_DESCRIPTOR, 0, count, null),
  );
  return Number(count[0]);
}

/** Stable host memory for by-value scalars: cuDNN reads it at execute time, after set-up returned. */
export function allocHostScalars(count: number): { address: bigint; view: DataView } {
  const memory = koffi.alloc('uint64_t', Math.max(count, 1));
  return { address: koffi.address(memory), view: new DataView(koffi.view(memory, 8 * Math.max(count, 1))) };
}

function descriptorName(type: number): string {
  const entry = Object.entries(DESCRIPTOR).find(([, value]) => value === type);
  return entry ? entry[0] : String(type);
}
