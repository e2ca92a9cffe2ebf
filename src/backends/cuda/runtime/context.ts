/**
 * The CUDA context and stream attnlab uses, per device (device 0 unless a multi-GPU caller picks
 * another with onDevice). All backends (naive, flash, cuDNN) enqueue on the device's one
 * non-blocking stream, so work is ordered between them without events, and the memory pool can
 * hand a released block to the next call without waiting: anything that used it ran earlier on the
 * same stream.
 *
 * The device's primary context is retained (not a new context) so that cuDNN, cuBLASLt and our own
 * cuMemAlloc buffers share one context — cuDNN picks up the current context at cudnnCreate.
 */
import { describeValue } from '../../../arguments.js';
import { config } from '../../../config.js';
import { AttnlabError, InvalidArgumentError, UnsupportedError } from '../../../errors.js';
import { lt } from '../ffi/cublaslt.js';
import { CU_DEVICE_ATTRIBUTE, CU_STREAM_NON_BLOCKING, cu, outBigInt, outInt } from '../ffi/driver.js';
import { loadLibrary } from '../ffi/libraries.js';
import { formatNcclVersion, nc } from '../ffi/nccl.js';
import { nv } from '../ffi/nvrtc.js';

/** What attnlab reads about the GPU once, at context creation. */
export interface DeviceProperties {
  readonly ordinal: number;
  readonly name: string;
  readonly computeCapability: { readonly major: number; readonly minor: number };
  readonly multiprocessorCount: number;
  readonly totalMemoryBytes: number;
  /** Shared memory one block may opt into (227 KiB on sm_90). */
  readonly maxSharedMemoryPerBlockOptin: number;
  readonly l2CacheBytes: number;
  /** As cuDriverGetVersion reports it, e.g. 13000 for CUDA 13.0. */
  readonly driverVersion: number;
  /**
   * Peak memory bandwidth in GB/s from the memory clock and bus width (2 transfers a clock: H100 SXM
   * 2619 MHz × 5120 bits = 3352, H200 3201 MHz × 6144 bits = 4916), or null where the driver does not
   * report them. Auto dispatch keys its tables by it (device-dispatch-table.ts).
   */
  readonly memoryBandwidthGBs?: number | null;
}

export interface CudaContext {
  /** CUdevice ordinal. */
  readonly device: number;
  readonly context: bigint;
  /** The non-blocking stream every backend enqueues on. */
  readonly stream: bigint;
  /**
   * A second non-blocking stream, for work that runs beside the main stream's inside one call (the
   * FP8 step's pipelined quantise and dequantise). Every use forks from the main stream and joins
   * back into it before the call returns, so the main stream's ordering rule above still holds.
   */
  readonly sideStream: bigint;
  readonly properties: DeviceProperties;
}

/** One context per device ordinal, made on first use (device 0 alone unless a caller asks for more). */
const contexts = new Map<number, CudaContext>();
let currentDevice = 0;
let deviceTotal: number | undefined;
let availability: { ok: true } | { ok: false; reason: string } | undefined;

/**
 * The context of the current device (device 0 unless inside onDevice): on the first call CUDA is
 * initialised (cuInit, device 0's primary context made current, two non-blocking streams); later
 * calls return the same object.
 * Throws LibraryNotFoundError when there is no libcuda, DeviceError when the driver fails.
 *
 * @example
 * const { stream, properties } = getCudaContext();
 * console.log(properties.name, properties.computeCapability);
 */
export function getCudaContext(): CudaContext {
  return contexts.get(currentDevice) ?? deviceContext(currentDevice);
}

/** How many CUDA devices the driver sees (initialises CUDA). */
export function deviceCount(): number {
  if (deviceTotal !== undefined) return deviceTotal;
  if (config().disableCuda) {
    throw new UnsupportedError(
      'cuda',
      'ATTNLAB_DISABLE_CUDA=1 disabled CUDA in this process (unset it to use the GPU)',
    );
  }
  const d = cu();
  d.cuInit(0);
  deviceTotal = outInt((s) => d.cuDeviceGetCount(s));
  if (deviceTotal === 0) throw new AttnlabError('cuDeviceGetCount: expected at least one CUDA device, got 0');
  return deviceTotal;
}

/**
 * The context of device `ordinal`: its primary context retained, its two streams made (with that
 * context current while they are made, then the current device's again). Multi-GPU work (one Node
 * process driving every GPU of the host, as context-parallel attention does) runs each device's part
 * inside onDevice; everything keyed by device (kernel modules, the memory pool, library handles)
 * follows the current device.
 */
export function deviceContext(ordinal: number): CudaContext {
  const known = contexts.get(ordinal);
  if (known) return known;
  const count = deviceCount();
  if (!Number.isInteger(ordinal) || ordinal < 0 || ordinal >= count)
    throw new InvalidArgumentError('device', `a CUDA device ordinal in [0, ${count})`, String(ordinal));
  const d = cu();
  const device = outInt((s) => d.cuDeviceGet(s, ordinal));
  const primary = outBigInt((s) => d.cuDevicePrimaryCtxRetain(s, device));
  d.cuCtxSetCurrent(primary);
  const stream = outBigInt((s) => d.cuStreamCreate(s, CU_STREAM_NON_BLOCKING));
  const sideStream = outBigInt((s) => d.cuStreamCreate(s, CU_STREAM_NON_BLOCKING));
  const made = { device, context: primary, stream, sideStream, properties: readProperties(device) };
  contexts.set(ordinal, made);
  const back = contexts.get(currentDevice);
  if (back && back !== made) d.cuCtxSetCurrent(back.context);
  return made;
}

/** The ordinal of the device getCudaContext() returns now. */
export function currentDeviceOrdinal(): number {
  return currentDevice;
}

/**
 * Runs `fn` with device `ordinal` current: its context is made current and getCudaContext() returns
 * it, so every allocation, launch and library call inside goes to that device; the previous device
 * is current again afterwards (also when fn throws). Tensors made inside live on that device.
 *
 * @example
 * const shard = onDevice(1, () => randomNormal([1, 4096, 16, 128], { seed: 1, dtype: 'bfloat16' }).to('cuda'));
 */
export function onDevice<R>(ordinal: number, fn: () => R): R {
  if (typeof fn !== 'function')
    throw new InvalidArgumentError('fn', 'a function to run on the device', describeValue(fn));
  const target = deviceContext(ordinal);
  const previous = currentDevice;
  if (previous === ordinal) return fn();
  const d = cu();
  d.cuCtxSetCurrent(target.context);
  currentDevice = ordinal;
  try {
    return fn();
  } finally {
    currentDevice = previous;
    d.cuCtxSetCurrent(deviceContext(previous).context);
  }
}

function readProperties(device: number): DeviceProperties {
  const d = cu();
  const attribute = (id: number) => outInt((s) => d.cuDeviceGetAttribute(s, id, device));
  const nameBytes = new Uint8Array(256);
  d.cuDeviceGetName(nameBytes, nameBytes.length, device);
  const end = nameBytes.indexOf(0);
  return {
    ordinal: device,
    name: new TextDecoder().decode(nameBytes.subarray(0, end < 0 ? nameBytes.length : end)),
    computeCapability: {
      major: attribute(CU_DEVICE_ATTRIBUTE.COMPUTE_CAPABILITY_MAJOR),
      minor: attribute(CU_DEVICE_ATTRIBUTE.COMPUTE_CAPABILITY_MINOR),
    },
    multiprocessorCount: attribute(CU_DEVICE_ATTRIBUTE.MULTIPROCESSOR_COUNT),
    totalMemoryBytes: Number(outBigInt((s) => d.cuDeviceTotalMem_v2(s, device))),
    maxSharedMemoryPerBlockOptin: attribute(CU_DEVICE_ATTRIBUTE.MAX_SHARED_MEMORY_PER_BLOCK_OPTIN),
    l2CacheBytes: attribute(CU_DEVICE_ATTRIBUTE.L2_CACHE_SIZE),
    driverVersion: outInt((s) => d.cuDriverGetVersion(s)),
    memoryBandwidthGBs: peakBandwidth(attribute),
  };
}

/** GB/s from the memory clock (kHz) and bus width (bits); null where either read fails or is 0. */
function peakBandwidth(attribute: (id: number) => number): number | null {
  try {
    const kHz = attribute(CU_DEVICE_ATTRIBUTE.MEMORY_CLOCK_RATE);
    const bits = attribute(CU_DEVICE_ATTRIBUTE.GLOBAL_MEMORY_BUS_WIDTH);
    return kHz > 0 && bits > 0 ? Math.round((2 * kHz * 1e3 * (bits / 8)) / 1e9) : null;
  } catch {
    return null;
  }
}

/**
 * Whether CUDA can be used here, and if not why (no libcuda, no device, driver error). Never throws;
 * the answer is computed once per process.
 */
export function cudaAvailable(): { ok: true } | { ok: false; reason: string } {
  if (availability) return availability;
  if (config().disableCuda) {
    availability = { ok: false, reason: 'ATTNLAB_DISABLE_CUDA=1' };
    return availability;
  }
  try {
    getCudaContext();
    availability = { ok: true };
  } catch (error) {
    availability = { ok: false, reason: error instanceof Error ? error.message : String(error) };
  }
  return availability;
}

/** Waits until everything enqueued on attnlab's stream has finished. */
export function synchronize(): void {
  cu().cuStreamSynchronize(getCudaContext().stream);
}

/** The arch NVRTC and nvcc should target: sm_90a on Hopper (wgmma/TMA need the `a`), else sm_XY. */
export function targetArch(properties: DeviceProperties = getCudaContext().properties): string {
  const { major, minor } = properties.computeCapability;
  return major === 9 && minor === 0 ? 'sm_90a' : `sm_${major}${minor}`;
}

/**
 * What `attnlab info` shows: the GPU, its compute capability and memory, the driver, and the version
 * and path of each library found (or why it was not). Initialises CUDA; call after cudaAvailable().
 */
export function cudaInfo(): Record<string, string> {
  const { properties: p } = getCudaContext();
  const info: Record<string, string> = {
    gpu: p.name,
    'compute capability': `${p.computeCapability.major}.${p.computeCapability.minor} (${targetArch(p)})`,
    multiprocessors: String(p.multiprocessorCount),
    memory: `${(p.totalMemoryBytes / 2 ** 30).toFixed(1)} GiB`,
    driver: `CUDA ${formatCudaVersion(p.driverVersion)} (${cu().path})`,
  };
  const probe = (name: string, read: () => string) => {
    try {
      info[name] = read();
    } catch (error) {
      info[name] = `not available: ${error instanceof Error ? error.message : String(error)}`;
    }
  };
  probe('nvrtc', () => `${nv().version} (${nv().path})`);
  probe('cublasLt', () => `${formatLibraryVersion(lt().version)} (${lt().path})`);
  probe('nccl', () => `${formatNcclVersion(nc().version)} (${nc().path})`);
  probe('cudnn', () => {
    const { lib, path } = loadLibrary('cudnn');
    return `${formatLibraryVersion(Number(lib.func('size_t cudnnGetVersion()')()))} (${path})`;
  });
  return info;
}

/** 13000 → "13.0" (cuDriverGetVersion's encoding: 1000·major + 10·minor). */
export function formatCudaVersion(version: number): string {
  return `${Math.floor(version / 1000)}.${Math.floor((version % 1000) / 10)}`;
}

/** cuBLASLt's and cuDNN 9's encoding, 10000·major + 100·minor + patch: 91400 → "9.14.0". */
export function formatLibraryVersion(version: number): string {
  return `${Math.floor(version / 10000)}.${Math.floor((version % 10000) / 100)}.${version % 100}`;
}
