/// <reference types="@webgpu/types" />
/**
 * The WebGPU device: one adapter and device per process (or page), found once by `initWebgpu()`.
 *
 * Where it comes from: `navigator.gpu` in a browser; in Node the optional npm package `webgpu`
 * (Dawn's dawn.node), imported only here and only when asked, so attnlab loads and its other
 * backends run where the package is absent or finds no adapter.
 *
 * Lifetime: the GPU object dawn.node's create() returns must outlive its devices. Dropped while a
 * device lives, Node aborts at exit ("terminate called after throwing an instance of
 * 'std::system_error': Invalid argument", a pthread mutex of the freed instance) or segfaults when
 * the collector frees it (both seen with dawn.node 0.6.2 on SwiftShader; keeping the object fixes
 * both). So it stays referenced here for the life of the process, and `disposeWebgpu()` (also run
 * at exit) destroys the device first.
 *
 * Device loss (a driver reset, `device.destroy()`): the loss is recorded, every call that needs
 * the device throws DeviceError naming the reason, and a new device is requested at once; the
 * call after `await initWebgpu()` runs on it. Tensors of the lost device are refused.
 */
import { checkKeys, checkOptionsObject, describeValue } from '../../arguments.js';
import { AttnlabError, DeviceError, InvalidArgumentError } from '../../errors.js';
import { chooseSgmatLayout } from './sgmat-check.js';
import type { MatrixShape } from './variant.js';

/** What `attnlab info` and `initWebgpu()` report about the adapter. */
export interface WebgpuInfo {
  readonly vendor: string;
  readonly architecture: string;
  readonly description: string;
  readonly backend: string;
  readonly features: readonly string[];
  readonly limits: WebgpuLimits;
  /**
   * Whether the subgroup kernels can run: the subgroups feature, with subgroups of at least 4
   * invocations (adapter.info.subgroupMinSize; 4 on SwiftShader, 32 on NVIDIA), so the tiled
   * kernel's 4 invocations of a row, and the row kernel's 2, share one.
   */
  readonly subgroups: boolean;
  /** adapter.info.subgroupMinSize and subgroupMaxSize (0 where the adapter does not say). */
  readonly subgroupSizes: { readonly min: number; readonly max: number };
  /**
   * The subgroup-matrix shape the fast forward uses: f16 operands and an f32 accumulator (Dawn's
   * chromium-experimental-subgroup-matrix with shader-f16; Vulkan's cooperative matrices), M×K
   * times K×N, with the kernel layout the device check chose (sgmat-check.ts), or null where the
   * device has no such configuration or no layout passed.
   */
  readonly subgroupMatrix: Omit<MatrixShape, 'sg' | 'keys'> | null;
  /**
   * Why the device's subgroup-matrix shape is not used though it has one: the sgmat kernel is run
   * once on a small problem when the device opens (sgmat-check.ts), and a wrong result drops it.
   */
  readonly subgroupMatrixRejected?: string;
}

/** The limits attnlab's kernels are checked against before a dispatch. */
export interface WebgpuLimits {
  readonly maxBufferSize: number;
  readonly maxStorageBufferBindingSize: number;
  readonly maxComputeWorkgroupStorageSize: number;
  readonly maxComputeInvocationsPerWorkgroup: number;
  readonly maxComputeWorkgroupsPerDimension: number;
  readonly maxStorageBuffersPerShaderStage: number;
}

const LIMIT_NAMES: readonly (keyof WebgpuLimits)[] = [
  'maxBufferSize',
  'maxStorageBufferBindingSize',
  'maxComputeWorkgroupStorageSize',
  'maxComputeInvocationsPerWorkgroup',
  'maxComputeWorkgroupsPerDimension',
  'maxStorageBuffersPerShaderStage',
];

/** The features attnlab asks for when the adapter has them. */
const WANTED_FEATURES = [
  'shader-f16',
  'subgroups',
  'timestamp-query',
  'chromium-experimental-subgroup-matrix',
];

export interface WebgpuContext {
  readonly device: GPUDevice;
  readonly adapter: GPUAdapter;
  readonly info: WebgpuInfo;
  /** Increases with every new device: a buffer of an older generation belongs to a lost device. */
  readonly generation: number;
}

export interface InitWebgpuOptions {
  /** A GPU object to use (navigator.gpu, or dawn.node's create()); found automatically otherwise. */
  readonly gpu?: GPU;
  /** Dawn switches for dawn.node's create(), e.g. ['backend=vulkan'] (Node only). */
  readonly dawnOptions?: readonly string[];
  readonly powerPreference?: GPUPowerPreference;
  /**
   * Node only, where attnlab creates dawn.node's GPU object: ask Dawn for its experimental features
   * (toggle allow_unsafe_apis: chromium-experimental-subgroup-matrix, the route to tensor cores
   * through Vulkan's cooperative matrices) and for shader-f16 on NVIDIA's Vulkan driver, which Dawn
   * leaves off by default (toggle vulkan_enable_f16_on_nvidia). The subgroup-matrix forward runs
   * only where both are granted and its device check passes. Default false.
   */
  readonly experimental?: boolean;
  /**
   * Node only: more Dawn toggles for dawn.node's create(), in the same enable-dawn-features switch
   * as the experimental ones (dawn.node keeps only the last switch of a name), e.g.
   * ['use_vulkan_memory_model'].
   */
  readonly dawnToggles?: readonly string[];
}

/** The Dawn toggles `experimental: true` adds to dawn.node's create(). */
export const EXPERIMENTAL_DAWN_TOGGLES = 'enable-dawn-features=allow_unsafe_apis,vulkan_enable_f16_on_nvidia';

let gpuObject: GPU | null = null;
let context: WebgpuContext | null = null;
let pending: Promise<WebgpuContext> | null = null;
let lostReason: string | null = null;
let generation = 0;
let lastOptions: InitWebgpuOptions = {};
let unavailable: string | null = null;
/** Validation and out-of-memory errors Dawn reported outside any call that could throw them. */
const uncaptured: string[] = [];

/** The npm package's name in a variable: a browser bundler must not try to resolve it. */
const DAWN_PACKAGE = 'webgpu';

async function findGpu(options: InitWebgpuOptions): Promise<GPU> {
  if (options.gpu) return options.gpu;
  if (gpuObject) return gpuObject;
  const nav = (globalThis as { navigator?: { gpu?: GPU } }).navigator;
  if (nav?.gpu) return (gpuObject = nav.gpu);
  let dawn: { create(options: string[]): GPU };
  try {
    dawn = await import(DAWN_PACKAGE);
  } catch (error) {
    throw new AttnlabError(
      `WebGPU is not available: no navigator.gpu, and the optional npm package 'webgpu' (Dawn) did not load ` +
        `(${error instanceof Error ? error.message : String(error)}); install it with npm install webgpu`,
    );
  }
  const toggles = [
    ...(options.experimental ? [EXPERIMENTAL_DAWN_TOGGLES.slice('enable-dawn-features='.length)] : []),
    ...(options.dawnToggles ?? []),
  ];
  gpuObject = dawn.create([
    ...(options.dawnOptions ?? []),
    ...(toggles.length ? [`enable-dawn-features=${toggles.join(',')}`] : []),
  ]);
  return gpuObject;
}

async function acquire(options: InitWebgpuOptions): Promise<WebgpuContext> {
  const gpu = await findGpu(options);
  const adapter = await gpu.requestAdapter({ powerPreference: options.powerPreference });
  if (!adapter) {
    throw new AttnlabError(
      "WebGPU found no adapter (in Node on Linux: a Vulkan loader, libvulkan1, and a driver Dawn accepts: a GPU vendor's, " +
        "Mesa ≥ 25 lavapipe, or the SwiftShader ICD of Debian's chromium package via " +
        "VK_ICD_FILENAMES=/usr/lib/chromium/vk_swiftshader_icd.json; Debian 12's Mesa 22.3 lavapipe is refused)",
    );
  }
  const features = WANTED_FEATURES.filter((f) => adapter.features.has(f)) as GPUFeatureName[];
  const requiredLimits: Record<string, number> = {};
  for (const name of LIMIT_NAMES) requiredLimits[name] = adapter.limits[name];
  const device = await adapter.requestDevice({ requiredFeatures: features, requiredLimits });
  const limits = Object.fromEntries(LIMIT_NAMES.map((n) => [n, device.limits[n]])) as unknown as WebgpuLimits;
  const raw = adapter.info as GPUAdapterInfo & { backendType?: string };
  const sizes = raw as { subgroupMinSize?: number; subgroupMaxSize?: number };
  const info: WebgpuInfo = {
    vendor: raw.vendor ?? '',
    architecture: raw.architecture ?? '',
    description: raw.description ?? '',
    backend: raw.backendType ?? '',
    features: [...device.features].sort(),
    limits,
    subgroups: device.features.has('subgroups') && (sizes.subgroupMinSize ?? 0) >= 4,
    subgroupSizes: { min: sizes.subgroupMinSize ?? 0, max: sizes.subgroupMaxSize ?? 0 },
    subgroupMatrix: f16MatrixConfig(device, raw),
  };
  const checked = await checkedMatrix(device, info);
  const made: WebgpuContext = { device, adapter, info: checked, generation: ++generation };
  device.addEventListener('uncapturederror', (event) => {
    uncaptured.push((event as GPUUncapturedErrorEvent).error.message);
  });
  void device.lost.then((loss) => {
    if (context !== made) return;
    context = null;
    if (loss.reason === 'destroyed' && disposing) return;
    lostReason = `${loss.reason}${loss.message ? `: ${loss.message}` : ''}`;
    // Recovery: ask for a new device now; webgpuReady() waits for it.
    pending = acquire(lastOptions).then(
      (next) => {
        context = next;
        lostReason = null;
        pending = null;
        return next;
      },
      (error) => {
        pending = null;
        throw error;
      },
    );
    pending.catch(() => {});
  });
  return made;
}

interface SubgroupMatrixConfig {
  readonly componentType: string;
  readonly resultComponentType: string;
  readonly M: number;
  readonly N: number;
  readonly K: number;
}

/**
 * The f16 × f16 → f32 subgroup-matrix configuration of the device, 16×16×16 where offered (NVIDIA's
 * cooperative matrices list it first), else the one of most products; null without the feature,
 * shader-f16 or such a configuration.
 */
function f16MatrixConfig(device: GPUDevice, raw: GPUAdapterInfo): WebgpuInfo['subgroupMatrix'] {
  if (!device.features.has('chromium-experimental-subgroup-matrix') || !device.features.has('shader-f16')) {
    return null;
  }
  const configs = ((raw as { subgroupMatrixConfigs?: readonly SubgroupMatrixConfig[] })
    .subgroupMatrixConfigs ?? []) as readonly SubgroupMatrixConfig[];
  const usable = configs
    .filter((c) => c.componentType === 'f16' && c.resultComponentType === 'f32')
    .map((c) => ({ M: c.M, N: c.N, K: c.K }))
    .filter((c) => c.M % 8 === 0 && c.N % 8 === 0 && c.K % 8 === 0);
  const square = usable.find((c) => c.M === 16 && c.N === 16 && c.K === 16);
  return square ?? [...usable].sort((a, b) => b.M * b.N * b.K - a.M * a.N * a.K)[0] ?? null;
}

/** `info` with its subgroup-matrix shape, or without it and the reason where the kernel's check fails. */
async function checkedMatrix(device: GPUDevice, info: WebgpuInfo): Promise<WebgpuInfo> {
  const { subgroupMatrix, subgroupSizes } = info;
  if (!subgroupMatrix) return info;
  if (subgroupSizes.min <= 0 || subgroupSizes.min !== subgroupSizes.max) {
    return { ...info, subgroupMatrix: null, subgroupMatrixRejected: 'subgroups of more than one size' };
  }
  const storage = info.limits.maxComputeWorkgroupStorageSize;
  const shape = { ...subgroupMatrix, sg: subgroupSizes.min };
  // The kernel's layouts in order of speed, the first the device computes right.
  const chosen = await chooseSgmatLayout(device, shape, storage);
  if ('layout' in chosen) return { ...info, subgroupMatrix: { ...subgroupMatrix, ...chosen.layout } };
  return { ...info, subgroupMatrix: null, subgroupMatrixRejected: chosen.reason };
}

let disposing = false;
let exitHooked = false;

/**
 * Finds the adapter and opens the device (once; later calls return the same). Throws an
 * AttnlabError saying why where WebGPU is not available.
 *
 * @example
 * const info = await initWebgpu();
 * console.log(info.description, info.features);
 */
export async function initWebgpu(options: InitWebgpuOptions = {}): Promise<WebgpuInfo> {
  const o = checkOptionsObject<InitWebgpuOptions>(
    'options',
    options,
    'an object { gpu?, dawnOptions?, powerPreference?, experimental?, dawnToggles? }',
  );
  checkKeys('options', o, ['gpu', 'dawnOptions', 'powerPreference', 'experimental', 'dawnToggles']);
  if (o.experimental !== undefined && typeof o.experimental !== 'boolean') {
    throw new InvalidArgumentError('options.experimental', 'a boolean', describeValue(o.experimental));
  }
  if (o.gpu !== undefined && (o.gpu === null || typeof o.gpu.requestAdapter !== 'function')) {
    throw new InvalidArgumentError(
      'options.gpu',
      'a GPU object (navigator.gpu, or dawn.node create())',
      describeValue(o.gpu),
    );
  }
  if (
    o.dawnOptions !== undefined &&
    !(Array.isArray(o.dawnOptions) && o.dawnOptions.every((x) => typeof x === 'string'))
  ) {
    throw new InvalidArgumentError(
      'options.dawnOptions',
      'an array of strings',
      describeValue(o.dawnOptions),
    );
  }
  if (
    o.dawnToggles !== undefined &&
    !(Array.isArray(o.dawnToggles) && o.dawnToggles.every((x) => typeof x === 'string' && /^\w+$/.test(x)))
  ) {
    throw new InvalidArgumentError(
      'options.dawnToggles',
      'an array of Dawn toggle names (letters, digits, underscores)',
      describeValue(o.dawnToggles),
    );
  }
  if (
    o.powerPreference !== undefined &&
    o.powerPreference !== 'low-power' &&
    o.powerPreference !== 'high-performance'
  ) {
    throw new InvalidArgumentError(
      'options.powerPreference',
      "'low-power' or 'high-performance'",
      describeValue(o.powerPreference),
    );
  }
  return (await webgpuReady(o)).info;
}

/**
 * The device once it is ready: the one open, the replacement being requested after a loss, or a
 * new one. `initWebgpu()` is this, with its options checked.
 */
export async function webgpuReady(options: InitWebgpuOptions = lastOptions): Promise<WebgpuContext> {
  if (context) return context;
  if (!pending) {
    lastOptions = options;
    pending = acquire(options).then(
      (made) => {
        context = made;
        pending = null;
        unavailable = null;
        hookExit();
        return made;
      },
      (error) => {
        pending = null;
        unavailable = error instanceof Error ? error.message : String(error);
        throw error;
      },
    );
  }
  return pending;
}

function hookExit(): void {
  const proc = (globalThis as { process?: { once(event: string, listener: () => void): void } }).process;
  if (exitHooked || !proc) return;
  exitHooked = true;
  proc.once('exit', disposeWebgpu);
}

/** Destroys the device (idempotent); a later initWebgpu() opens a new one. */
export function disposeWebgpu(): void {
  const current = context;
  context = null;
  if (!current) return;
  disposing = true;
  current.device.destroy();
  disposing = false;
}

/** The ready device, or a typed error: not initialised, or lost (with the reason). */
export function webgpuContext(): WebgpuContext {
  if (context) return context;
  if (lostReason !== null) {
    throw new DeviceError(
      'WebGPU',
      'device',
      'lost',
      `${lostReason} (await initWebgpu() for the new device)`,
    );
  }
  throw new AttnlabError('no WebGPU device is ready: await initWebgpu() first');
}

/** Whether a device is ready now, or why not (for registry support checks and `attnlab info`). */
export function webgpuState():
  | { readonly ok: true; readonly info: WebgpuInfo }
  | { readonly ok: false; readonly reason: string } {
  if (context) return { ok: true, info: context.info };
  if (lostReason !== null) return { ok: false, reason: `the WebGPU device was lost (${lostReason})` };
  return { ok: false, reason: unavailable ?? 'no WebGPU device is ready (await initWebgpu() first)' };
}

/** Errors Dawn reported since the last call, emptied: a readback throws them as DeviceError. */
export function takeUncapturedErrors(): string[] {
  return uncaptured.splice(0, uncaptured.length);
}

/**
 * Resolves when the device has finished the work queued so far (for timing: attention() only
 * queues its dispatch).
 */
export async function webgpuFinish(): Promise<void> {
  await webgpuContext().device.queue.onSubmittedWorkDone();
}
