/**
 * `attnlab info`: this machine, the GPU (compute capability, memory, driver) and the versions and paths
 * of the CUDA libraries attnlab found, or why a GPU path is not available. Lines stay within 100
 * columns: a reason that lists every path searched is cut into its clauses, one per line.
 */
import type { Command } from 'commander';
import { backwardDispatchSummary } from '../backends/backward-dispatch-table.js';
import { backwardModelWords } from '../backends/backward-registry.js';
import { cudaAvailable, cudaInfo } from '../backends/cuda/runtime/context.js';
import { autoDispatchSummary } from '../backends/dispatch-table.js';
import { BACKENDS } from '../backends/registry.js';
import { currentCalibration, currentDeviceClass } from '../backends/tuning-registry.js';
import { gpuPowerProbe, powerProbeReason } from '../bench/gpu-power.js';
import { probeWebgpu } from '../bench/webgpu-probe.js';
import { config } from '../config.js';
import { colorEnabled, renderTable } from '../report/terminal.js';
import { packageVersion } from '../version.js';

/** Backends by device, e.g. 'flash, reference (cpu)'. */
function backendsOn(device: 'cpu' | 'cuda' | 'webgpu'): string {
  const names = BACKENDS.filter((b) => b.device === device).map((b) => b.name);
  return `${names.join(', ')} (${device})`;
}

export function collectInfo(): Record<string, string> {
  const cuda = cudaAvailable();
  const info: Record<string, string> = {
    attnlab: packageVersion(),
    node: process.version,
    platform: `${process.platform} ${process.arch}`,
    // Only what can run here is "available"; the GPU backends are named with why they cannot.
    backends: cuda.ok ? `${backendsOn('cpu')}, ${backendsOn('cuda')}` : backendsOn('cpu'),
  };
  const cudaOrder = BACKENDS.filter((b) => b.device === 'cuda').map((b) => b.name);
  if (!cuda.ok) {
    info.cuda = `not available: ${cuda.reason}`;
    info['not available'] = `${backendsOn('cuda')}: they need a CUDA GPU`;
    info['auto dispatch'] = autoDispatchSummary(null, cudaOrder);
    info['auto backward'] = backwardDispatchSummary(null, backwardModelWords());
    return info;
  }
  for (const [key, value] of Object.entries(cudaInfo())) info[key] = String(value);
  // Timings on a GPU at its power limit run at lower clocks: bench rows record how long they were held there.
  const power = gpuPowerProbe();
  info['power limit'] = power
    ? `${power.limitWatts} W (NVML; bench rows record their time held at it)`
    : `not read: ${powerProbeReason()}`;
  // With implementation unset: a calibrated entry first, a recorded table of this architecture next, the model last.
  const { file, table } = currentCalibration();
  const entries = Object.keys(table.entries).length;
  info['auto dispatch'] =
    `calibrated: ${entries} shape class${entries === 1 ? '' : 'es'} in ${file}` +
    `${config().tune === 'off' ? ' (ignored: ATTNLAB_TUNE=0)' : entries === 0 ? ' (attnlab tune writes it)' : ''}; ` +
    `then ${autoDispatchSummary(currentDeviceClass(), cudaOrder)}`;
  info['auto backward'] =
    `calibrated entries first; then ${backwardDispatchSummary(currentDeviceClass(), backwardModelWords())}`;
  return info;
}

/**
 * The WebGPU adapter attnlab finds (Dawn's webgpu package): its name, the features the kernels use
 * and the limits they are checked against, or why there is none (probeWebgpu: in a child process).
 */
export function collectWebgpuInfo(): Record<string, string> {
  const probe = probeWebgpu();
  if (!probe.ok) return { webgpu: `not available: ${probe.reason}` };
  const { info } = probe;
  const name = [info.vendor, info.architecture, info.description].filter(Boolean).join(' ');
  const limits = info.limits;
  return {
    webgpu: `${name || 'unnamed adapter'}${info.backend ? ` (${info.backend})` : ''}; backend webgpu runs here`,
    'webgpu features': info.features.join(' ') || 'none',
    'webgpu limits':
      `maxBufferSize ${limits.maxBufferSize}; maxStorageBufferBindingSize ${limits.maxStorageBufferBindingSize}; ` +
      `maxComputeWorkgroupStorageSize ${limits.maxComputeWorkgroupStorageSize}`,
  };
}

/** A long value as lines at its clause boundaries ('; ', '. ', and '), ' between listed paths). */
export function clauses(value: string): string {
  if (value.length <= 80) return value;
  return value.replace(/(; |\. |\), )/g, (sep) => `${sep.trimEnd()}\n`);
}

export function registerInfoCommand(program: Command): void {
  program
    .command('info')
    .description('Show the GPU, driver and CUDA library versions attnlab found (or why none)')
    .option('--json', 'print JSON instead of a table')
    .action((options: { json?: boolean }) => {
      const webgpu = collectWebgpuInfo();
      const info = { ...collectInfo(), ...webgpu };
      if (!webgpu.webgpu.startsWith('not available')) info.backends += `, ${backendsOn('webgpu')}`;
      if (options.json) {
        process.stdout.write(`${JSON.stringify(info, null, 2)}\n`);
        return;
      }
      const rows = Object.entries(info).map(([k, v]) => [k, clauses(v)]);
      process.stdout.write(`${renderTable(['', 'value'], rows, { color: colorEnabled() })}\n`);
    });
}
