/**
 * Finding and loading the C libraries attnlab talks to: the CUDA driver (libcuda), NVRTC,
 * cuBLASLt, cuDNN, NCCL and NVML. Nothing here runs at import time: a machine without a GPU imports attnlab and
 * only pays for the search when a CUDA backend is first asked for.
 *
 * Search order, for each library: the ATTNLAB_<LIB> variable (a file, or a folder to look in), then
 * CUDA_HOME / CUDA_PATH, the /usr/local/cuda* toolkits, the distribution's library folders, Python's
 * `nvidia/<package>/lib` folders in the usual virtual-environment places, and last the bare soname,
 * which lets the dynamic loader use LD_LIBRARY_PATH and ldconfig. cuDNN differs: every copy found
 * is ranked by its version and the newest wins, because JAX and PyTorch ship a newer cuDNN in their
 * wheels than the system one and the newer one has more fused-attention engines.
 */
import { existsSync, readdirSync, readFileSync, realpathSync, statSync } from 'node:fs';
import { homedir } from 'node:os';
import { basename, dirname, join } from 'node:path';
import koffi, { type LibraryHandle } from 'koffi';
import { config, LIBRARY_VARIABLES, readConfig } from '../../../config.js';
import { LibraryNotFoundError } from '../../../errors.js';

export type LibraryName = 'cuda' | 'nvrtc' | 'cublasLt' | 'cudnn' | 'nccl' | 'nvml';

interface LibrarySpec {
  /** Sonames, newest first. */
  readonly sonames: readonly string[];
  /** Folder names under site-packages/nvidia/ that ship this library (CUDA 12 and 13 wheel layouts). */
  readonly pythonPackages: readonly string[];
  readonly hint: string;
}

const SPECS: Record<LibraryName, LibrarySpec> = {
  cuda: {
    sonames: ['libcuda.so.1', 'libcuda.so'],
    pythonPackages: [],
    hint: 'Install the NVIDIA driver, or set ATTNLAB_LIBCUDA to libcuda.so.1 or its folder.',
  },
  nvrtc: {
    sonames: ['libnvrtc.so.13', 'libnvrtc.so.12', 'libnvrtc.so'],
    pythonPackages: ['cu13', 'cuda_nvrtc'],
    hint: 'Install the CUDA toolkit (or pip install nvidia-cuda-nvrtc), or set ATTNLAB_NVRTC.',
  },
  cublasLt: {
    sonames: ['libcublasLt.so.13', 'libcublasLt.so.12', 'libcublasLt.so'],
    pythonPackages: ['cu13', 'cublas'],
    hint: 'Install the CUDA toolkit (or pip install nvidia-cublas), or set ATTNLAB_CUBLASLT.',
  },
  cudnn: {
    sonames: ['libcudnn.so.9', 'libcudnn.so'],
    pythonPackages: ['cudnn'],
    hint: 'Install cuDNN 9 (or pip install nvidia-cudnn-cu13), or set ATTNLAB_CUDNN.',
  },
  // Context-parallel attention across GPUs (backends/cuda/ffi/nccl.ts); PyTorch's wheels ship it.
  nccl: {
    sonames: ['libnccl.so.2', 'libnccl.so'],
    pythonPackages: ['nccl'],
    hint: 'Install NCCL 2 (or pip install nvidia-nccl-cu13), or set ATTNLAB_NCCL.',
  },
  // The GPU's power state beside benchmark rows (ffi/nvml.ts); the driver installs it beside libcuda.
  nvml: {
    sonames: ['libnvidia-ml.so.1', 'libnvidia-ml.so'],
    pythonPackages: [],
    hint: 'It comes with the NVIDIA driver; or set ATTNLAB_NVML to libnvidia-ml.so.1 or its folder.',
  },
};

/** Folders to look in, in order, for a library of the CUDA toolkit or the system. */
function systemFolders(env: NodeJS.ProcessEnv): string[] {
  const folders: string[] = [];
  for (const root of [env.CUDA_HOME, env.CUDA_PATH]) {
    if (root) folders.push(join(root, 'lib64'), join(root, 'targets/x86_64-linux/lib'), join(root, 'lib'));
  }
  const toolkits = ['/usr/local/cuda', ...globDirs('/usr/local', /^cuda-[\d.]+$/).sort(compareVersionPaths)];
  for (const root of toolkits) folders.push(join(root, 'lib64'), join(root, 'targets/x86_64-linux/lib'));
  folders.push('/usr/lib/x86_64-linux-gnu', '/usr/lib64', '/usr/lib', '/usr/lib/wsl/lib');
  return folders;
}

/** site-packages folders of the Python environments a GPU machine usually has. */
export function pythonSitePackages(env: NodeJS.ProcessEnv = process.env): string[] {
  const prefixes = [env.VIRTUAL_ENV, env.CONDA_PREFIX, join(homedir(), '.local'), '/usr/local', '/usr']
    .filter((p): p is string => Boolean(p))
    .concat(globDirs('/opt', /./).flatMap((d) => [join(d, '.venv'), join(d, 'venv'), d]));
  const sites: string[] = [];
  for (const prefix of prefixes) {
    for (const py of globDirs(join(prefix, 'lib'), /^python3(\.\d+)?$/)) {
      sites.push(join(py, 'site-packages'), join(py, 'dist-packages'));
    }
  }
  return sites.filter((s) => existsSync(s));
}

/** Every path worth trying for `name`, in search order. Files that do not exist are kept out. */
/**
 * The ATTNLAB_<LIB> value for `name`: from config(), or parsed from `env` when a caller (a test)
 * passes its own variables.
 */
function overrideFor(name: LibraryName, env: NodeJS.ProcessEnv | undefined): string | null {
  return (env ? readConfig(env) : config()).libraries[name];
}

export function libraryCandidates(name: LibraryName, env?: NodeJS.ProcessEnv): string[] {
  const spec = SPECS[name];
  const candidates: string[] = [];
  const inFolder = (folder: string) => spec.sonames.map((s) => join(folder, s));
  const override = overrideFor(name, env);
  if (override) candidates.push(...overrideCandidates(spec, override));
  for (const folder of systemFolders(env ?? process.env)) candidates.push(...inFolder(folder));
  for (const site of pythonSitePackages(env ?? process.env)) {
    for (const pkg of spec.pythonPackages) candidates.push(...inFolder(join(site, 'nvidia', pkg, 'lib')));
  }
  return [...new Set(candidates)].filter(isRegularFile);
}

/** The files an ATTNLAB_<LIB> value names: itself, or the sonames inside it when it is a folder. */
function overrideCandidates(spec: LibrarySpec, value: string): string[] {
  const files = isDirectory(value) ? spec.sonames.map((s) => join(value, s)) : [value];
  return files.filter(isRegularFile);
}

/**
 * A regular file (a symbolic link to one counts): only such a file is handed to dlopen, which reads a FIFO
 * until a writer comes (forever), a character device without end, and fails on a folder with a loader message
 * that names neither the variable nor the file.
 */
function isRegularFile(path: string): boolean {
  try {
    return statSync(path).isFile();
  } catch {
    return false;
  }
}

/** What a path an ATTNLAB_<LIB> variable names is, when it is not a library file to load. */
function notAFile(path: string): string {
  try {
    const s = statSync(path);
    if (s.isFIFO()) return 'a FIFO, not a regular file';
    if (s.isCharacterDevice() || s.isBlockDevice()) return 'a device, not a regular file';
    if (s.isSocket()) return 'a socket, not a regular file';
    if (s.isDirectory()) return 'a folder without the library in it';
    return 'not a regular file';
  } catch {
    return 'no such file';
  }
}

/**
 * The library's handle with `func` made typed: a file that loads but lacks a function attnlab declares (another
 * library under the expected name) is a LibraryNotFoundError naming the variable or search that chose the file,
 * the file and the missing function, rather than koffi's untyped Error from deep inside the first call.
 */
function guarded(name: LibraryName, lib: LibraryHandle, path: string, chosenBy: string): LibraryHandle {
  return new Proxy(lib, {
    get(target, key) {
      const member = Reflect.get(target, key);
      if (typeof member !== 'function') return member;
      if (key !== 'func') return member.bind(target);
      return (...args: unknown[]) => {
        try {
          return member.apply(target, args);
        } catch (error) {
          const wanted =
            typeof args[0] === 'string' ? (/(\w+)\s*\(/.exec(args[0])?.[1] ?? args[0]) : String(args[0]);
          throw new LibraryNotFoundError(
            libraryFileName(name),
            [`${chosenBy}${path} (loaded, but it has no function ${wanted}: ${firstLine(error)})`],
            SPECS[name].hint,
          );
        }
      };
    },
  });
}

/** What was loaded and from where, for `attnlab info`. */
export interface LoadedLibrary {
  readonly name: LibraryName;
  readonly lib: LibraryHandle;
  /** The file loaded, or the bare soname when the dynamic loader found it. */
  readonly path: string;
}

const loaded = new Map<LibraryName, LoadedLibrary>();

/**
 * Loads `name` once per process, trying each candidate in order; throws LibraryNotFoundError
 * listing every place tried (and why each failed to load) when none works.
 */
export function loadLibrary(name: LibraryName, env?: NodeJS.ProcessEnv): LoadedLibrary {
  const cached = loaded.get(name);
  if (cached) return cached;
  const spec = SPECS[name];
  const override = overrideFor(name, env);
  // An explicit variable is a demand, not a hint: when it names nothing loadable, say so rather than
  // quietly loading another copy.
  let candidates = override ? overrideCandidates(spec, override) : libraryCandidates(name, env);
  if (name === 'cudnn') candidates = rankByCudnnVersion(candidates);
  const tried: string[] = [];
  if (override && candidates.length === 0)
    tried.push(`${LIBRARY_VARIABLES[name]}=${override} (${notAFile(override)})`);
  for (const path of override ? candidates : [...candidates, ...spec.sonames]) {
    try {
      if (name === 'cudnn' && path.includes('/')) preloadCudnnSiblings(path);
      const lib = guarded(name, koffi.load(path), path, override ? `${LIBRARY_VARIABLES[name]}=` : '');
      const entry = { name, lib, path };
      loaded.set(name, entry);
      return entry;
    } catch (error) {
      tried.push(`${path} (${firstLine(error)})`);
    }
  }
  throw new LibraryNotFoundError(libraryFileName(name), tried, spec.hint);
}

function libraryFileName(name: LibraryName): string {
  return SPECS[name].sonames[0];
}

/**
 * The cuDNN version of a library file without loading it (loading two cuDNNs into one process mixes
 * their sub-libraries): from the real file name (libcudnn.so.9.14.0), else the cudnn_version.h
 * beside it, else the pip wheel's dist-info folder name. 0 when unknown.
 */
export function cudnnVersionOfFile(path: string): number {
  const real = safeRealpath(path);
  const fromName = /\.so\.(\d+)\.(\d+)\.(\d+)$/.exec(real);
  if (fromName) return Number(fromName[1]) * 10000 + Number(fromName[2]) * 100 + Number(fromName[3]);
  const header = join(dirname(dirname(real)), 'include', 'cudnn_version.h');
  if (isRegularFile(header)) {
    const text = readFileSync(header, 'utf8');
    const part = (k: string) => Number(new RegExp(`#define CUDNN_${k}\\s+(\\d+)`).exec(text)?.[1] ?? 0);
    return part('MAJOR') * 10000 + part('MINOR') * 100 + part('PATCHLEVEL');
  }
  const site = dirname(dirname(dirname(real)));
  for (const entry of safeReaddir(site)) {
    const m = /^nvidia_cudnn_cu\d+-(\d+)\.(\d+)\.(\d+)/.exec(entry);
    if (m) return Number(m[1]) * 10000 + Number(m[2]) * 100 + Number(m[3]);
  }
  return 0;
}

/** Newest first; stable for equal versions so the search order still decides ties. */
export function rankByCudnnVersion(paths: string[]): string[] {
  return paths
    .map((path, index) => ({ path, index, version: cudnnVersionOfFile(path) }))
    .sort((a, b) => b.version - a.version || a.index - b.index)
    .map((e) => e.path);
}

/**
 * cuDNN 9 opens libcudnn_graph, libcudnn_engines_* … by soname at run time; when the chosen copy is
 * not on the loader's path those names would resolve to another (older) cuDNN, or not at all.
 * Loading them first by absolute path, graph first since the others depend on it, makes the later
 * lookups by soname find these.
 */
/**
 * Handles of the preloaded sub-libraries. koffi unloads a library once its handle is garbage-collected,
 * which would pull these out from under cuDNN (seen on the H200: the second cuDNN call of a process
 * segfaulted), so they are held for the life of the process.
 */
const preloaded: ReturnType<typeof koffi.load>[] = [];

function preloadCudnnSiblings(path: string): void {
  const folder = dirname(safeRealpath(path));
  const major = /\.so\.(\d+)/.exec(basename(path))?.[1] ?? '9';
  const order = [
    'graph',
    'engines_precompiled',
    'engines_runtime_compiled',
    'heuristic',
    'ops',
    'cnn',
    'adv',
  ];
  for (const part of order) {
    const file = join(folder, `libcudnn_${part}.so.${major}`);
    if (isRegularFile(file)) preloaded.push(koffi.load(file, { global: true }));
  }
}

function globDirs(folder: string, pattern: RegExp): string[] {
  return safeReaddir(folder)
    .filter((e) => pattern.test(e))
    .map((e) => join(folder, e))
    .filter(isDirectory);
}

function compareVersionPaths(a: string, b: string): number {
  // Newest toolkit first: /usr/local/cuda-13.0 before /usr/local/cuda-12.4.
  const va = (/(\d+)\.(\d+)/.exec(a) ?? ['', '0', '0']).slice(1).map(Number);
  const vb = (/(\d+)\.(\d+)/.exec(b) ?? ['', '0', '0']).slice(1).map(Number);
  return vb[0] - va[0] || vb[1] - va[1];
}

function isDirectory(path: string): boolean {
  try {
    return statSync(path).isDirectory();
  } catch {
    return false;
  }
}

function safeReaddir(folder: string): string[] {
  try {
    return readdirSync(folder);
  } catch {
    return [];
  }
}

function safeRealpath(path: string): string {
  try {
    return realpathSync(path);
  } catch {
    return path;
  }
}

function firstLine(error: unknown): string {
  return String(error instanceof Error ? error.message : error).split('\n')[0];
}
