/**
 * `attnlab info`: this machine, the GPU (compute capability, memory, driver) and the versions and paths
 * of the CUDA libraries attnlab found, or why a GPU path is not available.
 */
import type { Command } from 'commander';
import { cudaAvailable, cudaInfo } from '../backends/cuda/context.js';
import { BACKENDS } from '../backends/registry.js';
import { packageVersion } from '../version.js';
import { renderKeyValues } from './table.js';

export function collectInfo(): Record<string, string> {
  const info: Record<string, string> = {
    attnlab: packageVersion(),
    node: process.version,
    platform: `${process.platform} ${process.arch}`,
    backends: BACKENDS.map((b) => `${b.name} (${b.device})`).join(', '),
  };
  const cuda = cudaAvailable();
  if (!cuda.ok) {
    info.cuda = `not available: ${cuda.reason}`;
    return info;
  }
  for (const [key, value] of Object.entries(cudaInfo())) info[key] = String(value);
  return info;
}

export function registerInfoCommand(program: Command): void {
  program
    .command('info')
    .description('Show the GPU, driver and CUDA library versions attnlab found (or why none)')
    .option('--json', 'print JSON instead of a table')
    .action((options: { json?: boolean }) => {
      const info = collectInfo();
      process.stdout.write(
        options.json ? `${JSON.stringify(info, null, 2)}\n` : `${renderKeyValues(info)}\n`,
      );
    });
}
