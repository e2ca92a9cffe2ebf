/**
 * Kernel compilation: a .cu file of src/kernels/ → NVRTC → CUBIN → a loaded module, behind two caches.
 *
 * - In memory: one loaded module per key for the life of the process.
 * - On disk: `<cache root>/kernels` (root: ATTNLAB_CACHE_DIR or `~/.cache/attnlab`), one `<key>.cubin` and a
 *   `<key>.json` (lowered kernel names, compile time) per key, each written to a temporary file and
 *   renamed, so a concurrent process never reads half a file. `ATTNLAB_KERNEL_CACHE=0` turns it off.
 * - The key is sha256 over the cache format version, the target arch, the NVRTC version, the options,
 *   the kernel name expressions, the source and every header it includes: any change recompiles.
 * - `ATTNLAB_ASSERT_NO_COMPILE=1` turns any NVRTC compile into an error, so a test can prove that a
 *   warm run compiled nothing (tinygrad's ASSERT_COMPILE).
 *
 * Includes are written relative to src/kernels (`#include "common/dtypes.cuh"`); nvcc gets
 * `-I src/kernels` for the same effect, so every .cu compiles standalone with either compiler.
 */
import { config } from '../../../config.js';
import { CompileError } from '../../../errors.js';
import { cu, outBigInt } from '../ffi/driver.js';
import { decodeCString, NVRTC_ERROR_COMPILATION, nv } from '../ffi/nvrtc.js';
import { currentDeviceOrdinal, getCudaContext, targetArch } from './context.js';
import { type KernelBinary, kernelCacheDir, kernelCacheKey, readCache, writeCache } from './kernel-cache.js';
import { byCodeUnits, kernelsDir, readKernelSources, sourceExcerpt } from './kernel-source.js';
import { prebuiltKey, readPrebuilt, shippable } from './prebuilt.js';

export { CACHE_FORMAT_VERSION, kernelCacheDir, kernelCacheKey } from './kernel-cache.js';
export { kernelsDir, readKernelSources, sourceExcerpt } from './kernel-source.js';

/** What to compile: one .cu file, the kernels to take out of it, and its specialisation. */
export interface KernelSpec {
  /** Path relative to src/kernels, e.g. 'naive/softmax.cu'. */
  readonly file: string;
  /** Name expressions of the kernels to load, e.g. 'attnlab_softmax<float, true>'. */
  readonly kernels: readonly string[];
  /** Preprocessor definitions (-D), part of the variant key. */
  readonly defines?: Readonly<Record<string, string | number>>;
  /** Extra NVRTC options. */
  readonly options?: readonly string[];
  /**
   * Generated source put before the file's own (score/mask modifiers, src/variants/prelude.ts), with its key;
   * the key joins the in-memory key and the source the compile-cache key. A module with one is never prebuilt.
   */
  readonly prelude?: { readonly source: string; readonly key: string };
}

export interface CompiledModule {
  readonly key: string;
  readonly module: bigint;
  /** CUfunction per name expression of the spec. */
  readonly functions: ReadonlyMap<string, bigint>;
}

/** How the last module was obtained and what it cost. */
export interface CompileStats {
  readonly file: string;
  readonly key: string;
  readonly source: 'memory' | 'prebuilt' | 'disk' | 'nvrtc';
  /** Time in this call: NVRTC compile for 'nvrtc', read + load for 'disk', ~0 for 'memory'. */
  readonly milliseconds: number;
  readonly cubinBytes: number;
}

const modules = new Map<string, CompiledModule>();
/**
 * The module already loaded for a spec (file, kernels, defines, options, kernels folder): a repeated
 * call skips reading and hashing the sources, ~20 µs that a tight loop of small calls would notice.
 * Within one process an edited .cu is therefore not picked up; a new process hashes it afresh.
 */
const bySpec = new Map<string, CompiledModule>();
const history: CompileStats[] = [];
/** History entries kept: enough for a test or a report, bounded for a loop of 10,000 calls. */
const HISTORY_LIMIT = 256;

function record(stats: CompileStats): void {
  history.push(stats);
  // Trimmed in halves, not an entry a call: shifting 256 entries on every warm call cost ~0.5 µs.
  if (history.length >= 2 * HISTORY_LIMIT) history.splice(0, history.length - HISTORY_LIMIT);
}

/** The last compile or cache lookup, for `attnlab` to report first-call compile time. */
export function lastCompileStats(): CompileStats | undefined {
  return history.at(-1);
}

/** The last HISTORY_LIMIT lookups made in this process, in order (a warm run shows only 'memory' and 'disk'). */
export function compileHistory(): readonly CompileStats[] {
  return history.slice(-HISTORY_LIMIT);
}

/** NVRTC options for `spec` on `arch`; sorted defines so that the key does not depend on key order. */
export function compileOptions(spec: KernelSpec, arch: string): string[] {
  const defines = Object.entries(spec.defines ?? {})
    .sort(([a], [b]) => byCodeUnits(a, b))
    .map(([name, value]) => `-D${name}=${value}`);
  return [
    `--gpu-architecture=${arch}`,
    '--std=c++17',
    '-default-device',
    ...defines,
    ...(spec.options ?? []),
  ];
}

/**
 * The loaded module for `spec` on this GPU: from memory, else from the disk cache, else compiled by
 * NVRTC (and stored). Throws CompileError with the log, the options and the numbered source lines.
 */
export function loadKernels(spec: KernelSpec): CompiledModule {
  const device = currentDeviceOrdinal();
  const dir = kernelsDir();
  // The last few specs, compared field by field: a call that builds its spec afresh (the flash backward's
  // every call) finds its module without joining the key below (~1–2 µs a call on the build machine).
  for (const r of recentSpecs)
    if (r.device === device && r.dir === dir && sameSpec(r.spec, spec)) {
      record({ file: spec.file, key: r.module.key, source: 'memory', milliseconds: 0, cubinBytes: 0 });
      return r.module;
    }
  const module = loadKernelsBySpecKey(spec, device, dir);
  // A copy: a caller may change its own spec's lists or defines afterwards.
  const kept: KernelSpec = {
    file: spec.file,
    kernels: [...spec.kernels],
    ...(spec.defines ? { defines: { ...spec.defines } } : {}),
    ...(spec.options ? { options: [...spec.options] } : {}),
    ...(spec.prelude ? { prelude: { source: '', key: spec.prelude.key } } : {}),
  };
  recentSpecs.unshift({ device, dir, spec: kept, module });
  if (recentSpecs.length > RECENT_SPECS) recentSpecs.pop();
  return module;
}

/** The last specs loadKernels answered, most recent first. */
const recentSpecs: { device: number; dir: string; spec: KernelSpec; module: CompiledModule }[] = [];
const RECENT_SPECS = 4;

function sameList(a: readonly string[] | undefined, b: readonly string[] | undefined): boolean {
  if (a === b) return true;
  if (a === undefined || b === undefined || a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

/** The same -D set: the same names with the same values, in any order (NVRTC's result does not depend on it). */
function sameDefines(a: KernelSpec['defines'], b: KernelSpec['defines']): boolean {
  if (a === b) return true;
  let count = 0;
  for (const name in b) {
    if (!Object.hasOwn(b, name)) continue;
    if (a === undefined || !Object.hasOwn(a, name) || a[name] !== b[name]) return false;
    count++;
  }
  for (const name in a) if (Object.hasOwn(a, name)) count--;
  return count === 0;
}

function sameSpec(a: KernelSpec, b: KernelSpec): boolean {
  return (
    a.file === b.file &&
    sameList(a.kernels, b.kernels) &&
    sameDefines(a.defines, b.defines) &&
    sameList(a.options, b.options) &&
    a.prelude?.key === b.prelude?.key
  );
}

function loadKernelsBySpecKey(spec: KernelSpec, device: number, dir: string): CompiledModule {
  // Modules are loaded into one device's context: the device is part of both in-memory keys.
  // Joined by hand: JSON.stringify of the same parts took ~1.5 µs of a warm decode call's ~15.
  let defines = '';
  for (const name in spec.defines) defines += `${name}=${spec.defines[name]} `;
  const specKey = `${device}\n${dir}\n${spec.file}\n${spec.kernels.join('\n')}\n\n${defines}\n${
    spec.options?.join('\n') ?? ''
  }\n${spec.prelude?.key ?? ''}`;
  const known = bySpec.get(specKey);
  if (known) {
    record({ file: spec.file, key: known.key, source: 'memory', milliseconds: 0, cubinBytes: 0 });
    return known;
  }
  const loaded = loadKernelsByKey(spec);
  bySpec.set(specKey, loaded);
  return loaded;
}

function loadKernelsByKey(spec: KernelSpec): CompiledModule {
  const arch = targetArch();
  const read = readKernelSources(spec.file);
  const headers = read.headers;
  const source = spec.prelude ? `${spec.prelude.source}${read.source}` : read.source;
  if (spec.prelude && config().debug >= 4)
    console.error(`[attnlab] generated prelude of ${spec.file}:\n${spec.prelude.source}`);
  const options = compileOptions(spec, arch);
  // A binary the package ships (prebuilt.ts) before NVRTC is even loaded.
  const shipped =
    !spec.prelude && shippable(spec.kernels)
      ? loadPrebuilt(spec, { arch, options, kernels: spec.kernels, source, headers })
      : null;
  if (shipped) return shipped;
  const key = kernelCacheKey({
    arch,
    nvrtcVersion: nv().version,
    options,
    kernels: spec.kernels,
    source,
    headers,
  });
  const started = performance.now();
  const inMemory = modules.get(`${currentDeviceOrdinal()}:${key}`);
  if (inMemory) {
    record({ file: spec.file, key, source: 'memory', milliseconds: 0, cubinBytes: 0 });
    return inMemory;
  }
  const useDisk = kernelCacheDir() !== null;
  const cached = useDisk ? readCache(key) : undefined;
  let binary = cached;
  if (!binary) {
    if (config().assertNoCompile) {
      throw new CompileError(
        spec.file,
        'ATTNLAB_ASSERT_NO_COMPILE=1 forbids compiling, and no cached binary exists',
        options,
        `key ${key}`,
      );
    }
    binary = compileWithNvrtc(spec, source, headers, options);
    if (useDisk) writeCache(key, binary);
  }
  const loaded = loadModule(key, binary);
  modules.set(`${currentDeviceOrdinal()}:${key}`, loaded);
  const milliseconds = cached ? performance.now() - started : binary.compileMs;
  record({
    file: spec.file,
    key,
    source: cached ? 'disk' : 'nvrtc',
    milliseconds,
    cubinBytes: binary.cubin.byteLength,
  });
  if (config().debug >= 3) {
    console.error(
      `[attnlab] kernels ${spec.kernels.join(', ')} from ${spec.file}: ${history.at(-1)?.source}, ${milliseconds.toFixed(1)} ms, key ${key.slice(0, 12)}`,
    );
  }
  return loaded;
}

/** The shipped module of `spec`, loaded (and kept in memory), or null where the package has none. */
function loadPrebuilt(spec: KernelSpec, parts: Parameters<typeof prebuiltKey>[0]): CompiledModule | null {
  const key = prebuiltKey(parts);
  const memoryKey = `${currentDeviceOrdinal()}:${key}`;
  const inMemory = modules.get(memoryKey);
  if (inMemory) {
    record({ file: spec.file, key, source: 'memory', milliseconds: 0, cubinBytes: 0 });
    return inMemory;
  }
  const started = performance.now();
  const cubin = readPrebuilt(parts.arch, key);
  if (!cubin) return null;
  const lowered = Object.fromEntries(spec.kernels.map((name) => [name, name]));
  const loaded = loadModule(key, { cubin, lowered, compileMs: 0 });
  modules.set(memoryKey, loaded);
  const milliseconds = performance.now() - started;
  record({ file: spec.file, key, source: 'prebuilt', milliseconds, cubinBytes: cubin.byteLength });
  if (config().debug >= 3) {
    console.error(
      `[attnlab] kernels ${spec.kernels.join(', ')} from ${spec.file}: prebuilt, ${milliseconds.toFixed(1)} ms, key ${key.slice(0, 12)}`,
    );
  }
  return loaded;
}

function compileWithNvrtc(
  spec: KernelSpec,
  source: string,
  headers: ReadonlyArray<readonly [string, string]>,
  options: readonly string[],
): KernelBinary {
  const n = nv();
  const started = performance.now();
  const prog = outBigInt((slot) =>
    n.nvrtcCreateProgram(
      slot,
      source,
      spec.file,
      headers.length,
      headers.map(([, t]) => t),
      headers.map(([name]) => name),
    ),
  );
  const progSlot = BigUint64Array.of(prog);
  try {
    for (const expression of spec.kernels) n.nvrtcAddNameExpression(prog, expression);
    const status = n.compile(prog, options);
    const log = programLog(prog);
    if (status === NVRTC_ERROR_COMPILATION) {
      throw new CompileError(spec.file, log, options, sourceExcerpt(log, spec.file, source, headers));
    }
    if (log.trim() && config().debug >= 2) console.error(`[attnlab] NVRTC log for ${spec.file}:\n${log}`);
    const lowered: Record<string, string> = {};
    for (const expression of spec.kernels) {
      lowered[expression] = decodeCString(outBigInt((slot) => n.nvrtcGetLoweredName(prog, expression, slot)));
    }
    const size = Number(outBigInt((slot) => n.nvrtcGetCUBINSize(prog, slot)));
    const cubin = new Uint8Array(size);
    n.nvrtcGetCUBIN(prog, cubin);
    return { cubin, lowered, compileMs: performance.now() - started };
  } finally {
    n.nvrtcDestroyProgram(progSlot);
  }
}

function programLog(prog: bigint): string {
  const n = nv();
  const size = Number(outBigInt((slot) => n.nvrtcGetProgramLogSize(prog, slot)));
  if (size <= 1) return '';
  const bytes = new Uint8Array(size);
  n.nvrtcGetProgramLog(prog, bytes);
  return new TextDecoder().decode(bytes.subarray(0, size - 1));
}

/**
 * The bytes of an extern "C" __device__ variable of a loaded module (cuModuleGetGlobal), e.g. a
 * value the kernel states about itself for a test to compare with the host's.
 */
export function readModuleGlobal(compiled: CompiledModule, name: string): Uint8Array {
  const d = cu();
  const address = new BigUint64Array(1);
  const size = new BigUint64Array(1);
  d.cuModuleGetGlobal_v2(address, size, compiled.module, name);
  const out = new Uint8Array(Number(size[0]));
  const { stream } = getCudaContext();
  if (out.byteLength > 0) d.cuMemcpyDtoHAsync_v2(out, address[0], out.byteLength, stream);
  d.cuStreamSynchronize(stream);
  return out;
}

function loadModule(key: string, binary: KernelBinary): CompiledModule {
  getCudaContext();
  const d = cu();
  const module = outBigInt((slot) => d.cuModuleLoadData(slot, binary.cubin));
  const functions = new Map<string, bigint>();
  for (const [expression, symbol] of Object.entries(binary.lowered)) {
    functions.set(
      expression,
      outBigInt((slot) => d.cuModuleGetFunction(slot, module, symbol)),
    );
  }
  return { key, module, functions };
}
