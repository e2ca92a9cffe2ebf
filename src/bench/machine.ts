/**
 * What a results file records about where it was measured: host, GPU, driver, library versions and
 * the attnlab commit. Every probe is optional: a missing library becomes a missing entry, never a
 * failed benchmark.
 */

import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { cpus, hostname } from 'node:os';
import { join } from 'node:path';
import { loadCudnn } from '../backends/cuda/ffi/cudnn.js';
import { nv } from '../backends/cuda/ffi/nvrtc.js';
import { cudaAvailable, getCudaContext } from '../backends/cuda/runtime/context.js';
import { config, runSettings } from '../config.js';
import { neutraliseLine } from '../results/safe-text.js';
import type { ResultsFile } from '../results/schema.js';
import { packageRoot, packageVersion } from '../version.js';
import { gpuPowerProbe } from './gpu-power.js';
import { gpuUuid } from './gpu-uuid.js';

/**
 * The attnlab commit: ATTNLAB_COMMIT when set (a checkout copied without .git), else
 * `git rev-parse --short HEAD` in the package folder with '-dirty' for local edits when that folder is
 * a git checkout of its own (an installed package inside an application's repository is not: git would
 * answer with the application's commit), else 'unknown'.
 */
export function attnlabCommit(): string {
  const configured = config().commit;
  // Written out as \xNN where it holds control characters: it reaches the terminal in bench's machine table.
  if (configured) return neutraliseLine(configured);
  const cwd = packageRoot();
  if (!cwd || !existsSync(join(cwd, '.git'))) return 'unknown';
  try {
    const git = (args: string[]) =>
      execFileSync('git', args, { cwd, encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
    const commit = git(['rev-parse', '--short', 'HEAD']);
    return git(['status', '--porcelain', '--untracked-files=no']) ? `${commit}-dirty` : commit;
  } catch {
    return 'unknown';
  }
}

/** The kernel driver's version from /proc (e.g. '580.159.04'); the driver API only gives the CUDA level. */
function kernelDriverVersion(): string | undefined {
  try {
    return /Kernel Module\s+([\d.]+)/.exec(readFileSync('/proc/driver/nvidia/version', 'utf8'))?.[1];
  } catch {
    return undefined;
  }
}

/** Host, GPU and library facts for a results file. Initialises CUDA when a GPU is usable. */
export function describeMachine(): ResultsFile['machine'] {
  const cpuList = cpus();
  const machine: ResultsFile['machine'] = {
    hostname: hostname(),
    platform: `${process.platform} ${process.arch}`,
    cpu: `${cpuList[0]?.model ?? 'unknown CPU'} × ${cpuList.length}`,
    node: process.version,
    device: 'cpu',
    libraries: {},
  };
  const settings = runSettings();
  if (Object.keys(settings).length > 0) machine.settings = settings;
  if (!cudaAvailable().ok) return machine;
  const p = getCudaContext().properties;
  const cudaLevel = `CUDA ${Math.floor(p.driverVersion / 1000)}.${(p.driverVersion % 1000) / 10}`;
  const kernel = kernelDriverVersion();
  machine.device = 'cuda';
  machine.gpu = {
    name: p.name,
    computeCapability: `${p.computeCapability.major}.${p.computeCapability.minor}`,
    memoryBytes: p.totalMemoryBytes,
    l2Bytes: p.l2CacheBytes,
    driver: kernel ? `${kernel} (${cudaLevel})` : cudaLevel,
    multiprocessors: p.multiprocessorCount,
  };
  if (p.memoryBandwidthGBs) machine.gpu.memoryBandwidthGBs = p.memoryBandwidthGBs;
  const uuid = gpuUuid(p.ordinal);
  if (uuid) machine.gpu.uuid = uuid;
  const power = gpuPowerProbe();
  if (power) machine.gpu.powerLimitWatts = power.limitWatts;
  const probe = (name: string, read: () => string) => {
    try {
      machine.libraries[name] = read();
    } catch (error) {
      machine.libraries[name] =
        `not loaded: ${error instanceof Error ? error.message.split('\n')[0] : error}`;
    }
  };
  probe('nvrtc', () => `${nv().version} (${nv().path})`);
  probe('cudnn', () => loadCudnn().description);
  return machine;
}

/** The command line as typed (argv without the node binary), for the results file. */
export function commandLine(argv: readonly string[] = process.argv): string {
  const args = argv.slice(2).map((a) => (/^[\w@%+=:,./-]+$/.test(a) ? a : `'${a.replace(/'/g, "'\\''")}'`));
  return ['attnlab', ...args].join(' ');
}

export { gpuUuid, packageVersion };
