/**
 * The CUDA driver API through koffi. Every function here is wrapped by `checked()`, so a call either
 * succeeds or throws a DeviceError with the status name (cuGetErrorName), its text and the call; no
 * caller ever sees a raw status.
 *
 * Marshalling rules (verified on the H200): handles and
 * device pointers are BigInt; out-parameters are declared `void *` and receive a one-element typed
 * array (BigUint64Array for handles and sizes, Int32Array for ints, Float32Array for floats).
 */
import koffi from 'koffi';
import { DeviceError } from '../../../errors.js';
import { loadLibrary } from './libraries.js';

/** CU_STREAM_NON_BLOCKING: our stream never waits on the legacy default stream (and vice versa). */
export const CU_STREAM_NON_BLOCKING = 1;
/** CU_EVENT_DEFAULT: events that record timing. */
export const CU_EVENT_DEFAULT = 0;
/** CU_EVENT_DISABLE_TIMING: events that only order streams (cheaper to record and wait on). */
export const CU_EVENT_DISABLE_TIMING = 2;
export const CUDA_ERROR_OUT_OF_MEMORY = 2;

/** The CUdevice_attribute values attnlab reads. */
export const CU_DEVICE_ATTRIBUTE = {
  MAX_THREADS_PER_BLOCK: 1,
  MAX_SHARED_MEMORY_PER_BLOCK: 8,
  MULTIPROCESSOR_COUNT: 16,
  COMPUTE_CAPABILITY_MAJOR: 75,
  COMPUTE_CAPABILITY_MINOR: 76,
  MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: 97,
  L2_CACHE_SIZE: 38,
  CLOCK_RATE: 13,
  /** Peak memory clock in kHz, and the bus width in bits: together the memory's peak bandwidth. */
  MEMORY_CLOCK_RATE: 36,
  GLOBAL_MEMORY_BUS_WIDTH: 37,
} as const;

/** The CUfunction_attribute values attnlab reads or sets. */
export const CU_FUNC_ATTRIBUTE = {
  MAX_THREADS_PER_BLOCK: 0,
  SHARED_SIZE_BYTES: 1,
  NUM_REGS: 4,
  LOCAL_SIZE_BYTES: 3,
  MAX_DYNAMIC_SHARED_SIZE_BYTES: 8,
  /** Percent of the L1/shared split to give shared memory (CU_SHAREDMEM_CARVEOUT_MAX_SHARED is 100). */
  PREFERRED_SHARED_MEMORY_CARVEOUT: 9,
} as const;

const PROTOTYPES = {
  cuInit: 'int cuInit(uint32_t flags)',
  cuDriverGetVersion: 'int cuDriverGetVersion(void *version)',
  cuDeviceGetCount: 'int cuDeviceGetCount(void *count)',
  cuDeviceGet: 'int cuDeviceGet(void *device, int ordinal)',
  cuDeviceGetName: 'int cuDeviceGetName(void *name, int len, int device)',
  cuDeviceGetAttribute: 'int cuDeviceGetAttribute(void *value, int attribute, int device)',
  cuDeviceTotalMem_v2: 'int cuDeviceTotalMem_v2(void *bytes, int device)',
  cuDeviceGetUuid_v2: 'int cuDeviceGetUuid_v2(void *uuid, int device)',
  cuDevicePrimaryCtxRetain: 'int cuDevicePrimaryCtxRetain(void *context, int device)',
  cuCtxSetCurrent: 'int cuCtxSetCurrent(void *context)',
  cuCtxSynchronize: 'int cuCtxSynchronize()',
  cuStreamCreate: 'int cuStreamCreate(void *stream, uint32_t flags)',
  cuStreamSynchronize: 'int cuStreamSynchronize(void *stream)',
  cuStreamWaitEvent: 'int cuStreamWaitEvent(void *stream, void *event, uint32_t flags)',
  cuMemAlloc_v2: 'int cuMemAlloc_v2(void *dptr, size_t bytes)',
  cuMemFree_v2: 'int cuMemFree_v2(uint64_t dptr)',
  cuMemGetInfo_v2: 'int cuMemGetInfo_v2(void *free, void *total)',
  cuMemcpyHtoDAsync_v2: 'int cuMemcpyHtoDAsync_v2(uint64_t dst, void *src, size_t bytes, void *stream)',
  /** The same call with the source as an address: page-locked staging (runtime/staging.ts). */
  cuMemcpyHtoDAsyncFromAddress:
    'int cuMemcpyHtoDAsync_v2(uint64_t dst, uint64_t src, size_t bytes, void *stream)',
  cuMemHostAlloc: 'int cuMemHostAlloc(_Out_ void **pointer, size_t bytes, uint32_t flags)',
  cuMemcpyDtoHAsync_v2: 'int cuMemcpyDtoHAsync_v2(void *dst, uint64_t src, size_t bytes, void *stream)',
  cuMemcpyDtoDAsync_v2: 'int cuMemcpyDtoDAsync_v2(uint64_t dst, uint64_t src, size_t bytes, void *stream)',
  cuMemsetD8Async: 'int cuMemsetD8Async(uint64_t dptr, uint8_t value, size_t count, void *stream)',
  cuMemsetD32Async: 'int cuMemsetD32Async(uint64_t dptr, uint32_t value, size_t count, void *stream)',
  cuEventCreate: 'int cuEventCreate(void *event, uint32_t flags)',
  cuEventDestroy_v2: 'int cuEventDestroy_v2(void *event)',
  cuEventRecord: 'int cuEventRecord(void *event, void *stream)',
  cuEventSynchronize: 'int cuEventSynchronize(void *event)',
  cuEventElapsedTime: 'int cuEventElapsedTime(void *ms, void *start, void *end)',
  cuModuleLoadData: 'int cuModuleLoadData(void *module, void *image)',
  cuModuleUnload: 'int cuModuleUnload(void *module)',
  cuModuleGetFunction: 'int cuModuleGetFunction(void *function, void *module, const char *name)',
  cuModuleGetGlobal_v2: 'int cuModuleGetGlobal_v2(void *dptr, void *bytes, void *module, const char *name)',
  cuFuncSetAttribute: 'int cuFuncSetAttribute(void *function, int attribute, int value)',
  cuFuncGetAttribute: 'int cuFuncGetAttribute(void *value, int attribute, void *function)',
  cuLaunchKernel:
    'int cuLaunchKernel(void *f, uint32_t gx, uint32_t gy, uint32_t gz, uint32_t bx, uint32_t by, ' +
    'uint32_t bz, uint32_t shmem, void *stream, void *params, void *extra)',
  cuLaunchKernelEx: 'int cuLaunchKernelEx(void *config, void *f, void *params, void *extra)',
  cuGraphCreate: 'int cuGraphCreate(void *graph, uint32_t flags)',
  cuGraphDestroy: 'int cuGraphDestroy(void *graph)',
  cuGraphInstantiateWithFlags: 'int cuGraphInstantiateWithFlags(void *exec, void *graph, uint64_t flags)',
  /** CUDA 12's cuGraphExecUpdate: the third argument is a CUgraphExecUpdateResultInfo (24 bytes). */
  cuGraphExecUpdate_v2: 'int cuGraphExecUpdate_v2(void *exec, void *graph, void *resultInfo)',
  cuGraphExecDestroy: 'int cuGraphExecDestroy(void *exec)',
  cuGraphLaunch: 'int cuGraphLaunch(void *exec, void *stream)',
  cuStreamBeginCapture_v2: 'int cuStreamBeginCapture_v2(void *stream, int mode)',
  cuStreamEndCapture: 'int cuStreamEndCapture(void *stream, void *graph)',
} as const;

export type DriverFunctionName = keyof typeof PROTOTYPES;
// biome-ignore lint/suspicious/noExplicitAny: koffi functions take JS values of many kinds.
export type Driver = Record<DriverFunctionName, (...args: any[]) => void> & { readonly path: string };

let driver: Driver | undefined;

/** The driver functions, bound on first use (loads libcuda then). Each throws DeviceError on failure. */
export function cu(): Driver {
  if (driver) return driver;
  const { lib, path } = loadLibrary('cuda');
  const errorName = lib.func('int cuGetErrorName(int status, void *name)');
  const errorString = lib.func('int cuGetErrorString(int status, void *text)');
  const describe = (status: number): [string, string] => {
    const out = new BigUint64Array(1);
    const name =
      errorName(status, out) === 0 && out[0] !== 0n ? koffi.decode.string(out[0]) : `CUresult ${status}`;
    out[0] = 0n;
    const text = errorString(status, out) === 0 && out[0] !== 0n ? koffi.decode.string(out[0]) : '';
    return [name, text];
  };
  const bound: Record<string, unknown> = { path };
  for (const [name, prototype] of Object.entries(PROTOTYPES)) {
    bound[name] = checked('CUDA driver', name, lib.func(prototype), describe);
  }
  driver = bound as Driver;
  return driver;
}

/**
 * Wraps a C function returning a status so that any non-zero status throws DeviceError.
 * `status` is kept on the error (as `DeviceError.status`, the name), so callers can react to
 * CUDA_ERROR_OUT_OF_MEMORY without parsing text.
 */
export function checked(
  library: string,
  call: string,
  fn: (...args: unknown[]) => unknown,
  describe: (status: number) => [string, string],
): (...args: unknown[]) => void {
  return (...args: unknown[]) => {
    const status = fn(...args) as number;
    if (status !== 0) {
      const [name, text] = describe(status);
      throw new DeviceError(library, call, name, text);
    }
  };
}

/** Reads a handle or size out-parameter: `out(fn)` calls fn with a fresh slot and returns its value. */
export function outBigInt(fn: (slot: BigUint64Array) => void): bigint {
  const slot = new BigUint64Array(1);
  fn(slot);
  return slot[0];
}

export function outInt(fn: (slot: Int32Array) => void): number {
  const slot = new Int32Array(1);
  fn(slot);
  return slot[0];
}
