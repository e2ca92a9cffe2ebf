/**
 * The on-disk kernel cache: `<cache root>/kernels` (root: ATTNLAB_CACHE_DIR, default
 * `~/.cache/attnlab`; off with ATTNLAB_KERNEL_CACHE=0), one `<key>.cubin`
 * and one `<key>.json` (lowered kernel names, compile time) per key, each written to a temporary file
 * and renamed so that a concurrent process never reads half a file. The key is sha256 over
 * everything that changes the binary.
 */
import { createHash } from 'node:crypto';
import { mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { config } from '../../../config.js';

/** Bump when the cached files' format or meaning changes. */
export const CACHE_FORMAT_VERSION = 1;

export interface KernelBinary {
  readonly cubin: Uint8Array;
  /** Name expression → lowered (mangled) symbol. */
  readonly lowered: Record<string, string>;
  readonly compileMs: number;
}

/** Where compiled kernels are kept, or null when the disk cache is off. */
export function kernelCacheDir(): string | null {
  return config().kernelCacheDir;
}

/** The cache key: sha256 of everything that changes the binary. */
export function kernelCacheKey(parts: {
  arch: string;
  nvrtcVersion: string;
  options: readonly string[];
  kernels: readonly string[];
  source: string;
  headers: ReadonlyArray<readonly [string, string]>;
}): string {
  const hash = createHash('sha256');
  hash.update(
    JSON.stringify([CACHE_FORMAT_VERSION, parts.arch, parts.nvrtcVersion, parts.options, parts.kernels]),
  );
  hash.update(`\0${parts.source}`);
  for (const [name, text] of parts.headers) hash.update(`\0${name}\0${text}`);
  return hash.digest('hex');
}

export function readCache(key: string): (KernelBinary & { compileMs: number }) | undefined {
  const dir = kernelCacheDir();
  if (!dir) return undefined;
  const base = join(dir, key);
  try {
    const meta = JSON.parse(readFileSync(`${base}.json`, 'utf8')) as {
      lowered: Record<string, string>;
      compileMs: number;
    };
    const cubin = new Uint8Array(readFileSync(`${base}.cubin`));
    return { cubin, lowered: meta.lowered, compileMs: meta.compileMs };
  } catch {
    return undefined; // missing or unreadable: compile again
  }
}

export function writeCache(key: string, binary: KernelBinary): void {
  const dir = kernelCacheDir();
  if (!dir) return;
  try {
    mkdirSync(dir, { recursive: true });
    const base = join(dir, key);
    const tmp = `.${process.pid}.${Date.now()}.tmp`;
    // The names first: readCache needs both, and the .cubin's arrival is what makes an entry whole.
    writeFileSync(
      `${base}.json${tmp}`,
      JSON.stringify({ lowered: binary.lowered, compileMs: binary.compileMs }),
    );
    renameSync(`${base}.json${tmp}`, `${base}.json`);
    writeFileSync(`${base}.cubin${tmp}`, binary.cubin);
    renameSync(`${base}.cubin${tmp}`, `${base}.cubin`);
  } catch (error) {
    // A read-only home must not stop attnlab; the in-memory cache still applies.
    if (config().debug >= 1) console.error(`[attnlab] kernel cache not written: ${error}`);
  }
}
