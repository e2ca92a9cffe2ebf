/**
 * Kernels shipped compiled: the package carries nvcc-built cubins under dist/kernels/<arch>/ (built by
 * scripts/prebuild-kernels.ts at `npm pack`; the list is flash/shipped.ts), each named by the key of
 * the spec it was built from — the compile cache's key (kernel-cache.ts: source and headers, options,
 * kernel names, arch) with the compiler named 'nvcc' instead of NVRTC's version. compile.ts asks here
 * before NVRTC: a shipped binary loads in ~1 ms (gunzip + cuModuleLoadData) where NVRTC takes 1.4–2.4
 * s for a Hopper forward variant. A changed source changes the key, so a stale binary is never taken.
 *
 * Only extern "C" kernels are shipped: their symbol is their name, where a template's needs NVRTC's
 * lowered name.
 */
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { gunzipSync } from 'node:zlib';
import { kernelCacheKey } from './kernel-cache.js';

/** The compiler a shipped key names in place of NVRTC's version. */
export const PREBUILT_COMPILER = 'nvcc';

let overrideDir: string | null | undefined;
let defaultDir: string | undefined;

/** dist/kernels of the package, found from this module whether it runs from src/ (tsx) or dist/src/. */
export function prebuiltDir(): string {
  if (overrideDir !== undefined && overrideDir !== null) return overrideDir;
  if (defaultDir) return defaultDir;
  const here = dirname(fileURLToPath(import.meta.url));
  // dist/src/backends/cuda/runtime → dist/kernels; src/backends/cuda/runtime → dist/kernels beside src/.
  const candidates = [join(here, '../../../../kernels'), join(here, '../../../../dist/kernels')];
  defaultDir = candidates.find((c) => existsSync(c)) ?? candidates[1];
  return defaultDir;
}

/** Points the loader at another folder of shipped binaries (tests, the build script's check); null restores. */
export function usePrebuiltDir(dir: string | null): void {
  overrideDir = dir;
}

/** Whether every name of `kernels` is a plain extern "C" identifier (a shipped binary can serve it). */
export function shippable(kernels: readonly string[]): boolean {
  return kernels.every((k) => /^[A-Za-z_]\w*$/.test(k));
}

/** The key a shipped binary of this spec is filed under. */
export function prebuiltKey(parts: {
  arch: string;
  options: readonly string[];
  kernels: readonly string[];
  source: string;
  headers: ReadonlyArray<readonly [string, string]>;
}): string {
  return kernelCacheKey({ ...parts, nvrtcVersion: PREBUILT_COMPILER });
}

/** The path of a shipped binary: <dir>/<arch>/<key>.cubin.gz. */
export function prebuiltPath(arch: string, key: string, dir = prebuiltDir()): string {
  return join(dir, arch, `${key}.cubin.gz`);
}

/** The shipped cubin of `key` for `arch`, or undefined where the package has none (or it is unreadable). */
export function readPrebuilt(arch: string, key: string): Uint8Array | undefined {
  try {
    return new Uint8Array(gunzipSync(readFileSync(prebuiltPath(arch, key))));
  } catch {
    return undefined;
  }
}
