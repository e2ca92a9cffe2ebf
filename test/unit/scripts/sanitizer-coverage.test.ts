/**
 * Every kernel file under src/kernels/ has a memcheck, a racecheck and a synccheck run in scripts/gpu-verify.sh:
 * the script runs (sanitizer runs only) with a fake `node` and a fake `compute-sanitizer` on PATH, and the table
 * it prints at the end ("kernel files under each tool", from the KERNELS each run names) must list every `.cu`
 * with all three tools; every `.cuh` must be included, directly or through other headers, by a `.cu` that is
 * listed. A new kernel file, or a run dropped from the script, fails here before any GPU time is spent.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import {
  chmodSync,
  copyFileSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('../../../', import.meta.url));
const kernels = join(root, 'src/kernels');
const TOOLS = ['memcheck', 'racecheck', 'synccheck'];

const FAKE_NODE = `#!/usr/bin/env bash
echo "TAP version 13"
echo "ok 1 - fake"
echo "# pass 1"
echo "# fail 0"
echo "# skipped 0"
`;
const FAKE_SANITIZER = `#!/usr/bin/env bash
while [ "$1" != node ]; do shift; done
"$@"
echo "========= ERROR SUMMARY: 0 errors"
`;

const work = mkdtempSync(join(tmpdir(), 'attnlab-sanitizer-coverage-'));
after(() => rmSync(work, { recursive: true, force: true }));

/** Kernel sources under src/kernels, relative to it. */
function kernelFiles(ext: string): string[] {
  return readdirSync(kernels, { recursive: true, encoding: 'utf8' })
    .filter((f) => f.endsWith(ext))
    .sort();
}

let table: Map<string, Set<string>> | undefined;

/** The kernel files → tools table gpu-verify.sh prints after its sanitizer runs (fake node); run once. */
function sanitizedKernels(): Map<string, Set<string>> {
  table ??= runScript();
  return table;
}

function runScript(): Map<string, Set<string>> {
  const tree = join(work, 'tree');
  const bin = join(work, 'bin');
  mkdirSync(join(tree, 'scripts'), { recursive: true });
  mkdirSync(bin, { recursive: true });
  for (const file of ['gpu-verify.sh', 'gpu-lib.sh'])
    copyFileSync(join(root, 'scripts', file), join(tree, 'scripts', file));
  for (const file of readdirSync(join(root, 'test/gpu'), { recursive: true, encoding: 'utf8' })) {
    if (!file.endsWith('.test.ts')) continue;
    mkdirSync(dirname(join(tree, 'test/gpu', file)), { recursive: true });
    writeFileSync(join(tree, 'test/gpu', file), '');
  }
  writeFileSync(join(bin, 'node'), FAKE_NODE);
  writeFileSync(join(bin, 'compute-sanitizer'), FAKE_SANITIZER);
  chmodSync(join(bin, 'node'), 0o755);
  chmodSync(join(bin, 'compute-sanitizer'), 0o755);
  const result = spawnSync('bash', ['scripts/gpu-verify.sh', join(work, 'out'), '20', 'sanitizers'], {
    cwd: tree,
    encoding: 'utf8',
    env: { ...process.env, PATH: `${bin}:${process.env.PATH}` },
    timeout: 90_000,
  });
  assert.equal(result.status, 0, result.stderr);
  const table = result.stdout.split('== kernel files under each tool (src/kernels/)\n')[1];
  assert.ok(table, `no kernel table in\n${result.stdout}`);
  const byFile = new Map<string, Set<string>>();
  for (const line of table.trim().split('\n')) {
    const [file, tools] = line.split(':');
    byFile.set(file.trim(), new Set(tools.trim().split(/\s+/)));
  }
  return byFile;
}

describe('sanitizer coverage of src/kernels', () => {
  const missing = ['timeout', 'tar', 'xz'].filter(
    (c) => spawnSync('bash', ['-c', `command -v ${c}`]).status !== 0,
  );
  const skip = missing.length > 0 ? `needs ${missing.join(', ')} on PATH` : false;

  test('every .cu file has a memcheck, racecheck and synccheck run; every named file exists', {
    skip,
  }, () => {
    const table = sanitizedKernels();
    const sources = kernelFiles('.cu');
    assert.ok(sources.length >= 20, `found ${sources.length} .cu files`);
    const gaps = sources.flatMap((file) => {
      const tools = table.get(file) ?? new Set<string>();
      const absent = TOOLS.filter((t) => !tools.has(t));
      return absent.length > 0 ? [`${file}: no ${absent.join(', ')} run`] : [];
    });
    assert.deepEqual(
      gaps,
      [],
      'kernel files without a sanitizer run (KERNELS=… sanitize_all in gpu-verify.sh)',
    );
    const unknown = [...table.keys()].filter((file) => !sources.includes(file));
    assert.deepEqual(unknown, [], 'KERNELS names a file that is not under src/kernels');
  });

  test('every .cuh file is included by a .cu file (directly or through headers)', () => {
    const includes = (file: string) =>
      [...readFileSync(join(kernels, file), 'utf8').matchAll(/^\s*#include "([^"]+)"/gm)].map((m) => m[1]);
    const reached = new Set<string>();
    const visit = (file: string) => {
      for (const header of includes(file)) {
        if (reached.has(header) || !kernelFiles('.cuh').includes(header)) continue;
        reached.add(header);
        visit(header);
      }
    };
    for (const source of kernelFiles('.cu')) visit(source);
    assert.deepEqual(
      kernelFiles('.cuh').filter((h) => !reached.has(h)),
      [],
      'headers no kernel file includes (so no sanitizer run reaches them)',
    );
  });

  test('the check fails for a kernel file with no run', { skip }, () => {
    // The same comparison as above, on the script's table against a source list with one more file.
    const table = sanitizedKernels();
    const sources = [...kernelFiles('.cu'), 'ops/new_kernel.cu'];
    const uncovered = sources.filter((file) => !TOOLS.every((t) => table.get(file)?.has(t)));
    assert.deepEqual(uncovered, ['ops/new_kernel.cu']);
  });
});
