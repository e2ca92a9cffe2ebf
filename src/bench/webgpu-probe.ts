/**
 * Whether a WebGPU adapter opens here, asked in a child process: Dawn prints its adapter warnings
 * straight to stderr (Debian 12's lavapipe: "Vulkan shaderUniform*ArrayDynamicIndexing required"),
 * which `attnlab info`'s table and the lab's output must not carry. The answer is kept for the
 * process: the adapters a machine has do not change while it runs.
 */
import { spawnSync } from 'node:child_process';
import type { WebgpuInfo } from '../backends/webgpu/runtime.js';

export type WebgpuProbe =
  | { readonly ok: true; readonly info: WebgpuInfo }
  | { readonly ok: false; readonly reason: string };

let answer: WebgpuProbe | null = null;

export function probeWebgpu(): WebgpuProbe {
  if (answer) return answer;
  const runtime = new URL('../backends/webgpu/runtime.js', import.meta.url).href;
  const code =
    `const m = await import(${JSON.stringify(runtime)});` +
    'try { const info = await m.initWebgpu(); process.stdout.write(JSON.stringify({ ok: true, info })); m.disposeWebgpu(); }' +
    ' catch (e) { process.stdout.write(JSON.stringify({ ok: false, reason: e instanceof Error ? e.message : String(e) })); }';
  // The loader flags this process runs with (tsx from the sources), none of a test runner's.
  const loaders: string[] = [];
  process.execArgv.forEach((arg, i) => {
    if (/^--(import|loader|require)$/.test(arg)) loaders.push(arg, process.execArgv[i + 1]);
    else if (/^--(import|loader|require)=/.test(arg)) loaders.push(arg);
  });
  const run = spawnSync(process.execPath, [...loaders, '--input-type=module', '-e', code], {
    encoding: 'utf8',
    timeout: 30_000,
  });
  try {
    answer = JSON.parse(run.stdout) as WebgpuProbe;
  } catch {
    const end = run.signal ? `was ended by ${run.signal}` : `exited with ${run.status}`;
    answer = { ok: false, reason: `the WebGPU probe ${end} (${run.stderr.trim().split('\n').at(-1) ?? ''})` };
  }
  return answer;
}
