/**
 * Builds the kernels attnlab ships (src/backends/cuda/flash/shipped.ts) with nvcc for every shipped
 * target into dist/kernels/<arch>/<key>.cubin.gz, the key being the one the loader computes
 * (src/backends/cuda/runtime/prebuilt.ts), and writes dist/kernels/manifest.json (each binary's arch, file,
 * defines, key and size). Runs at `npm pack` (prepack) where nvcc is installed; a user's install never
 * compiles (a checkout without dist/kernels compiles with NVRTC on first use, as before).
 *
 * Run: node --import tsx scripts/prebuild-kernels.ts [--out dir] [--jobs n] [--arch sm_90a,...] [--head-dims 64,…]
 *   [--dtypes bfloat16,…] (the last two build part of the set)
 */
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { gzipSync } from 'node:zlib';
import { SHIPPED_ARCHS, shippedFlashSpecs } from '../src/backends/cuda/flash/shipped.js';
import {
  compileOptions,
  type KernelSpec,
  kernelsDir,
  readKernelSources,
} from '../src/backends/cuda/runtime/compile.js';
import { prebuiltDir, prebuiltKey, prebuiltPath } from '../src/backends/cuda/runtime/prebuilt.js';

export interface ShippedBinary {
  readonly arch: string;
  readonly file: string;
  readonly kernels: readonly string[];
  readonly defines: Readonly<Record<string, string | number>>;
  readonly key: string;
  readonly bytes: number;
}

/** nvcc's arguments for `spec` on `arch`: the test's (kernels-compile.test.ts) with the variant's -D macros. */
export function nvccArguments(spec: KernelSpec, arch: string, out: string): string[] {
  const defines = Object.entries(spec.defines ?? {}).map(([name, value]) => `-D${name}=${value}`);
  return [
    '-cubin',
    `-arch=${arch}`,
    '-std=c++17',
    '-I',
    kernelsDir(),
    ...defines,
    '-o',
    out,
    join(kernelsDir(), spec.file),
  ];
}

/** The key the loader will look `spec` up by on `arch`. */
export function shippedKey(spec: KernelSpec, arch: string): string {
  const { source, headers } = readKernelSources(spec.file);
  return prebuiltKey({ arch, options: compileOptions(spec, arch), kernels: spec.kernels, source, headers });
}

function run(command: string, args: string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let log = '';
    child.stdout.on('data', (d) => (log += d));
    child.stderr.on('data', (d) => (log += d));
    child.on('error', reject);
    child.on('close', (code) =>
      code === 0 ? resolve(log) : reject(new Error(`${command} ${args.join(' ')}: exit ${code}\n${log}`)),
    );
  });
}

/** Builds every shipped spec of `archs` into `out`, `jobs` nvcc processes at a time. */
export async function prebuild(
  out: string,
  archs: readonly string[],
  jobs: number,
  only: Parameters<typeof shippedFlashSpecs>[1] = {},
): Promise<ShippedBinary[]> {
  const work = archs.flatMap((arch) => shippedFlashSpecs(arch, only).map((spec) => ({ arch, spec })));
  const scratch = mkdtempSync(join(tmpdir(), 'attnlab-prebuild-'));
  const built: ShippedBinary[] = [];
  let next = 0;
  const worker = async () => {
    while (next < work.length) {
      const { arch, spec } = work[next++];
      const key = shippedKey(spec, arch);
      const cubin = join(scratch, `${key}.cubin`);
      await run('nvcc', nvccArguments(spec, arch, cubin));
      const packed = gzipSync(readFileSync(cubin), { level: 9 });
      const path = prebuiltPath(arch, key, out);
      mkdirSync(dirname(path), { recursive: true });
      writeFileSync(path, packed);
      built.push({
        arch,
        file: spec.file,
        kernels: spec.kernels,
        defines: spec.defines ?? {},
        key,
        bytes: packed.byteLength,
      });
      process.stderr.write(
        `[${built.length}/${work.length}] ${arch} ${spec.file} ${(packed.byteLength / 1024).toFixed(0)} KiB\n`,
      );
    }
  };
  try {
    await Promise.all(Array.from({ length: Math.max(1, jobs) }, worker));
  } finally {
    rmSync(scratch, { recursive: true, force: true });
  }
  built.sort((a, b) => a.arch.localeCompare(b.arch) || a.key.localeCompare(b.key));
  writeFileSync(
    join(out, 'manifest.json'),
    `${JSON.stringify({ compiler: 'nvcc', binaries: built }, null, 2)}\n`,
  );
  return built;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const args = process.argv.slice(2);
  const value = (name: string) => {
    const i = args.indexOf(name);
    return i >= 0 ? args[i + 1] : undefined;
  };
  const out = value('--out') ?? prebuiltDir();
  const archs = value('--arch')?.split(',') ?? [...SHIPPED_ARCHS];
  const jobs = Number(value('--jobs') ?? 2);
  // Part of the set (a quick build for a measurement): --head-dims 64,128 and --dtypes bfloat16.
  const only = {
    headDims: value('--head-dims')?.split(',').map(Number),
    dtypes: value('--dtypes')?.split(','),
  };
  prebuild(out, archs, jobs, only).then(
    (built) => {
      const total = built.reduce((a, b) => a + b.bytes, 0);
      console.log(
        `${built.length} kernels for ${archs.join(', ')} in ${out}: ${(total / 2 ** 20).toFixed(2)} MiB`,
      );
    },
    (error) => {
      console.error(error instanceof Error ? error.message : String(error));
      process.exitCode = 1;
    },
  );
}
