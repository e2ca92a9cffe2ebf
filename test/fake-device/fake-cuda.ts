/**
 * The stand-in CUDA stack for CPU tests of the FFI paths, in a fresh folder: test/fake-device/cudnn-fake.c
 * built as the driver and cuDNN (with `cudnnGraph`, also as cuDNN's sub-library, which is preloaded
 * from the same folder), cublaslt-fake.c as cuBLASLt (its matmuls launch through the stand-in driver),
 * te-fake-nvrtc.c as NVRTC (the kernels around cuDNN are NVRTC builds). The
 * ATTNLAB_* variables point at them. The libraries load lazily, at the first CUDA call, so setting
 * the variables after the imports (then reloadConfig) is in time; each test file is its own process.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import koffi from 'koffi';
import { reloadConfig } from '../../src/config.js';

export interface FakeCudaOptions {
  /** Build libcudnn_graph.so.9 too. */
  readonly cudnnGraph?: boolean;
  /** Leave the on-disk cuDNN plan cache on (default off: the stand-in's plan JSON holds a pointer
   *  into its own process, so a plan read from disk would dangle). */
  readonly planCache?: boolean;
}

export function useFakeCudaStack(
  prefix: string,
  options: FakeCudaOptions = {},
): { readonly dir: string; readonly skip: string | false } {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  const here = (name: string) => fileURLToPath(new URL(name, import.meta.url));
  const compile = (source: string, name: string) =>
    spawnSync('cc', ['-shared', '-fPIC', '-O1', '-o', join(dir, name), here(source), '-lm', '-ldl'], {
      encoding: 'utf8',
    });
  const built = [
    compile('./cudnn-fake.c', 'libcuda.so.1'),
    compile('./cudnn-fake.c', 'libcudnn.so.9'),
    ...(options.cudnnGraph ? [compile('./cudnn-fake.c', 'libcudnn_graph.so.9')] : []),
    compile('./cublaslt-fake.c', 'libcublasLt.so.13'),
    compile('./te-fake-nvrtc.c', 'libnvrtc.so.13'),
  ];
  const skip = built.every((b) => b.status === 0)
    ? false
    : `no C compiler: ${built.map((b) => b.error?.message ?? b.stderr).join(' ')}`;
  process.env.ATTNLAB_LIBCUDA = join(dir, 'libcuda.so.1');
  process.env.ATTNLAB_CUDNN = join(dir, 'libcudnn.so.9');
  process.env.ATTNLAB_CUBLASLT = join(dir, 'libcublasLt.so.13');
  process.env.ATTNLAB_NVRTC = join(dir, 'libnvrtc.so.13');
  process.env.ATTNLAB_CACHE_DIR = join(dir, 'cache');
  process.env.ATTNLAB_KERNEL_CACHE = '0';
  if (!options.planCache) process.env.ATTNLAB_CUDNN_PLAN_CACHE = '0';
  reloadConfig();
  return { dir, skip };
}

/**
 * The stand-in libraries' calls made while `fn` runs, by function name (driver, cuDNN and cuBLASLt
 * together; test/fake-device/cudnn-fake.c and cublaslt-fake.c count them), with `fn`'s result: what one attention call costs in
 * library calls, for a test to pin.
 */
export function libraryCallsDuring<R>(
  dir: string,
  fn: () => R,
): { calls: Record<string, number>; result: R } {
  const readers = ['libcuda.so.1', 'libcudnn.so.9', 'libcublasLt.so.13'].map((name) =>
    koffi.load(join(dir, name)).func('const char *fake_call_counts()'),
  );
  const read = () => {
    const total: Record<string, number> = {};
    for (const reader of readers)
      for (const [name, n] of Object.entries(JSON.parse(reader() as string) as Record<string, number>))
        total[name] = (total[name] ?? 0) + n;
    return total;
  };
  const before = read();
  const result = fn();
  const calls: Record<string, number> = {};
  for (const [name, n] of Object.entries(read()))
    if (n !== (before[name] ?? 0)) calls[name] = n - (before[name] ?? 0);
  return { calls, result };
}
