/**
 * Every src/kernels/**\/*.cu compiles with nvcc for sm_80 and sm_90a, standalone, and we print its
 * registers and spills (ptxas -v). Needs nvcc (CI has it), not a GPU; skips with a message without it.
 *
 * The pattern every .cu follows (so that this test picks new files up with no change here):
 * - includes are written relative to src/kernels (`#include "common/dtypes.cuh"`); the test passes
 *   `-I src/kernels`, NVRTC gets the same headers by name from compile.ts;
 * - no CUDA headers: NVRTC then needs no include path (see common/dtypes.cuh);
 * - a kernel that is a template, or is specialised by -D macros, has a block
 *   `#ifdef ATTNLAB_NVCC_TEST … #endif` that instantiates or defines representative variants, since
 *   nvcc emits no code for an uninstantiated template. The test defines ATTNLAB_NVCC_TEST;
 * - a file whose instructions need a newer GPU than sm_80 (FP8 conversions need sm_89) says so in a
 *   comment line `// attnlab-min-arch: sm_89`; lower targets are then skipped with that reason.
 */

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { after, describe, test } from 'node:test';
import { kernelsDir } from '../../src/backends/cuda/runtime/compile.js';

const ARCHS = ['sm_80', 'sm_90a'] as const;

/** The compute capability of 'sm_89' / 'sm_90a' as a number (89, 90). */
function archNumber(arch: string): number {
  return Number(/sm_(\d+)/.exec(arch)?.[1] ?? 0);
}

function minimumArch(file: string): string | null {
  return /^\s*\/\/\s*attnlab-min-arch:\s*(sm_\d+a?)/m.exec(readFileSync(file, 'utf8'))?.[1] ?? null;
}

function cuFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((entry) => {
    const path = join(dir, entry);
    if (statSync(path).isDirectory()) return cuFiles(path);
    return entry.endsWith('.cu') ? [path] : [];
  });
}

function nvccPath(): string | null {
  const found = spawnSync('nvcc', ['--version'], { encoding: 'utf8' });
  return found.status === 0 ? 'nvcc' : null;
}

/** "kernel: N registers, S spill bytes" per function, from ptxas -v's output. */
export function ptxasSummary(stderr: string): string[] {
  const lines: string[] = [];
  let fn = '';
  for (const line of stderr.split('\n')) {
    const named = /Compiling entry function '([^']+)'|Function properties for (\S+)/.exec(line);
    if (named) fn = named[1] ?? named[2];
    const spill = /(\d+) bytes spill stores, (\d+) bytes spill loads/.exec(line);
    if (spill && (spill[1] !== '0' || spill[2] !== '0'))
      lines.push(`${fn}: SPILLS ${spill[1]}/${spill[2]} bytes`);
    const regs = /Used (\d+) registers/.exec(line);
    if (regs) lines.push(`${fn}: ${regs[1]} registers`);
  }
  return lines;
}

const root = kernelsDir();
const files = cuFiles(root);
const nvcc = nvccPath();
const out = mkdtempSync(join(tmpdir(), 'attnlab-nvcc-'));
after(() => rmSync(out, { recursive: true, force: true }));

describe('kernels compile with nvcc', () => {
  test('there are kernels to compile', () => {
    assert.ok(
      files.some((f) => f.endsWith('softmax.cu')),
      `softmax.cu under ${root}`,
    );
  });
  for (const file of files) {
    for (const arch of ARCHS) {
      const name = relative(root, file);
      test(`${name} for ${arch}`, (t) => {
        if (!nvcc) {
          t.skip('nvcc not found on PATH (install the CUDA toolkit to run this test)');
          return;
        }
        const minimum = minimumArch(file);
        if (minimum && archNumber(arch) < archNumber(minimum)) {
          t.skip(`${name} declares attnlab-min-arch: ${minimum}`);
          return;
        }
        const cubin = join(out, `${name.replace(/[/.]/g, '_')}.${arch}.cubin`);
        const args = [
          '-cubin',
          `-arch=${arch}`,
          '-std=c++17',
          '-DATTNLAB_NVCC_TEST',
          '-I',
          root,
          '-Xptxas',
          '-v',
          '-o',
          cubin,
          file,
        ];
        const result = spawnSync(nvcc, args, { encoding: 'utf8' });
        const log = `${result.stdout}${result.stderr}`;
        assert.equal(result.status, 0, `nvcc ${args.join(' ')} failed:\n${log}`);
        assert.doesNotMatch(log, /\berror\b/i, log);
        const summary = ptxasSummary(result.stderr);
        assert.ok(
          summary.length > 0,
          `ptxas reported no kernels for ${name}: is its ATTNLAB_NVCC_TEST block missing?\n${log}`,
        );
        t.diagnostic(`${name} ${arch}: ${summary.join('; ')}`);
      });
    }
  }
});
