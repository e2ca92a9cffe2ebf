/**
 * What the example tests share: the list of examples/ programs and a runner that starts each one as a
 * user would (`node examples/x.mjs`), with 'attnlab' resolved to src/index.ts through the package's
 * `attnlab-source` export condition and the TypeScript sources loaded by tsx.
 */
import { spawn } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

export const root = fileURLToPath(new URL('../../', import.meta.url));
export const examplesDir = join(root, 'examples');

/** Every program in examples/ (ES modules and the CommonJS one), sorted. */
export function exampleFiles(): string[] {
  return readdirSync(examplesDir)
    .filter((name) => /\.(mjs|cjs)$/.test(name))
    .sort();
}

export interface ExampleRun {
  readonly code: number | null;
  readonly stdout: string;
  readonly stderr: string;
}

/** Runs one example to its end (or `timeoutMs`) with `env` added to this process's environment. */
export function runExample(
  name: string,
  env: Record<string, string>,
  timeoutMs: number,
): Promise<ExampleRun> {
  return new Promise((resolve) => {
    const child = spawn(
      process.execPath,
      ['--import', 'tsx', '--conditions=attnlab-source', join(examplesDir, name)],
      { cwd: root, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'], timeout: timeoutMs },
    );
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk) => {
      stdout += chunk;
    });
    child.stderr.on('data', (chunk) => {
      stderr += chunk;
    });
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}
