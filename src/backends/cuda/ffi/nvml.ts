/**
 * NVML (libnvidia-ml, installed with the NVIDIA driver) through koffi: only what a benchmark needs to say
 * about the GPU's power state while it timed a row — the enforced power limit, the total energy counter and
 * the time the GPU spent held below its clocks by the power limit.
 *
 * Why: call after call at ~4.4 TB/s an H200 runs at its 700 W cap and lowers its SM clock (nvidia-smi showed
 * 1.2–1.9 GHz with the SW power cap active, benchmarks/results/h200/decode/2026-12-02-1m-tokens-k8-k4), and one kernel read 5–10%
 * less a call than another of equal speed with the host hidden because of it; of four H200s on one day two
 * never reached the cap. A row that says how long its GPU was capped can be trusted across runs.
 *
 * Marshalling as driver.ts: out-parameters are `void *` receiving typed arrays; the nvmlDevice_t handle is a
 * pointer, carried as a BigInt through a `uint64_t` parameter (the same 64-bit register in the x86-64 ABI).
 * Every call goes through `checked()`: a non-zero nvmlReturn_t throws DeviceError with nvmlErrorString's text.
 */
import { checked } from './driver.js';
import { loadLibrary } from './libraries.js';

/** nvmlPerfPolicyType_t NVML_PERF_POLICY_POWER: time held below application clocks by the power limit. */
export const NVML_PERF_POLICY_POWER = 0;

const PROTOTYPES = {
  nvmlInit_v2: 'int nvmlInit_v2()',
  nvmlDeviceGetHandleByUUID: 'int nvmlDeviceGetHandleByUUID(const char *uuid, void *device)',
  nvmlDeviceGetEnforcedPowerLimit: 'int nvmlDeviceGetEnforcedPowerLimit(uint64_t device, void *milliwatts)',
  nvmlDeviceGetTotalEnergyConsumption:
    'int nvmlDeviceGetTotalEnergyConsumption(uint64_t device, void *millijoules)',
  // nvmlViolationTime_t: { unsigned long long referenceTime (µs, host clock); violationTime (ns, cumulative) }
  nvmlDeviceGetViolationStatus: 'int nvmlDeviceGetViolationStatus(uint64_t device, int policy, void *time)',
} as const;

type NvmlFunctionName = keyof typeof PROTOTYPES;
// biome-ignore lint/suspicious/noExplicitAny: koffi functions take JS values of many kinds.
export type Nvml = Record<NvmlFunctionName, (...args: any[]) => void> & { readonly path: string };

let nvml: Nvml | undefined;

/** The NVML functions, bound and nvmlInit_v2 called on first use. Throws LibraryNotFoundError, DeviceError. */
export function nvmlApi(): Nvml {
  if (nvml) return nvml;
  const { lib, path } = loadLibrary('nvml');
  const errorString = lib.func('const char *nvmlErrorString(int result)');
  const describe = (status: number): [string, string] => [
    `nvmlReturn_t ${status}`,
    String(errorString(status) ?? ''),
  ];
  const bound: Record<string, unknown> = { path };
  for (const [name, prototype] of Object.entries(PROTOTYPES)) {
    bound[name] = checked('NVML', name, lib.func(prototype), describe);
  }
  const n = bound as Nvml;
  n.nvmlInit_v2();
  nvml = n;
  return nvml;
}

/** One reading of the counters a window of time is measured between (gpu-power.ts). */
export interface PowerCounters {
  /** The host clock of the violation reading, µs (NVML's referenceTime). */
  readonly referenceUs: bigint;
  /** Cumulative ns the power limit held the GPU below its application clocks. */
  readonly powerViolationNs: bigint;
  /** Cumulative energy since the driver loaded, mJ. */
  readonly energyMj: bigint;
}

/** The NVML device whose UUID (GPU-…, as cuDeviceGetUuid gives it: bench/gpu-uuid.ts) is `uuid`. */
export function nvmlDevice(uuid: string): bigint {
  const slot = new BigUint64Array(1);
  nvmlApi().nvmlDeviceGetHandleByUUID(uuid, slot);
  return slot[0];
}

export function enforcedPowerLimitWatts(device: bigint): number {
  const slot = new Uint32Array(1);
  nvmlApi().nvmlDeviceGetEnforcedPowerLimit(device, slot);
  return slot[0] / 1000;
}

export function readPowerCounters(device: bigint): PowerCounters {
  const n = nvmlApi();
  const violation = new BigUint64Array(2);
  n.nvmlDeviceGetViolationStatus(device, NVML_PERF_POLICY_POWER, violation);
  const energy = new BigUint64Array(1);
  n.nvmlDeviceGetTotalEnergyConsumption(device, energy);
  return { referenceUs: violation[0], powerViolationNs: violation[1], energyMj: energy[0] };
}
