/**
 * ATTNLAB_<LIB> paths: only a regular file is handed to the loader (a FIFO blocked dlopen, and with it
 * cudaAvailable(), `attnlab info` and a CPU-only bench, forever), and a file that loads but is another library
 * is a LibraryNotFoundError naming the variable, the file and the missing function.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import { nvmlApi } from '../../../../../src/backends/cuda/ffi/nvml.js';
import { reloadConfig } from '../../../../../src/config.js';
import { LibraryNotFoundError } from '../../../../../src/errors.js';

const scratch = mkdtempSync(join(tmpdir(), 'attnlab-libpaths-'));
after(() => rmSync(scratch, { recursive: true, force: true }));
const root = join(import.meta.dirname, '..', '..', '..', '..', '..');

describe('library paths', () => {
  test('ATTNLAB_LIBCUDA naming a FIFO: cudaAvailable() answers at once, saying what the path is', () => {
    const fifo = join(scratch, 'libcuda.so.1');
    assert.equal(spawnSync('mkfifo', [fifo]).status, 0);
    const child = spawnSync(
      process.execPath,
      [
        '--import',
        'tsx',
        '-e',
        "import('./src/index.ts').then((m) => console.log(JSON.stringify(m.cudaAvailable())))",
      ],
      { cwd: root, env: { ...process.env, ATTNLAB_LIBCUDA: fifo }, timeout: 60_000, encoding: 'utf8' },
    );
    assert.equal(child.signal, null, `killed after 60 s: the FIFO was opened (${child.stderr})`);
    const answer = JSON.parse(child.stdout.trim().split('\n').at(-1) ?? '{}');
    assert.equal(answer.ok, false);
    assert.match(answer.reason, /ATTNLAB_LIBCUDA=.*libcuda\.so\.1 \(a FIFO, not a regular file\)/);
  });

  test('a library without the expected functions is a LibraryNotFoundError naming the variable and the file', () => {
    const other = ['/lib/x86_64-linux-gnu/libm.so.6', '/usr/lib64/libm.so.6', '/lib64/libm.so.6'].find(
      (p) => spawnSync('test', ['-f', p]).status === 0,
    );
    if (!other) return; // no libm at a known path: nothing to load in place of NVML
    const saved = process.env.ATTNLAB_NVML;
    process.env.ATTNLAB_NVML = other;
    reloadConfig();
    try {
      assert.throws(nvmlApi, (e: unknown) => {
        assert.ok(e instanceof LibraryNotFoundError, String(e));
        assert.match(e.message, /ATTNLAB_NVML=/);
        assert.ok(e.message.includes(other));
        assert.match(e.message, /has no function nvmlErrorString/);
        return true;
      });
    } finally {
      if (saved === undefined) delete process.env.ATTNLAB_NVML;
      else process.env.ATTNLAB_NVML = saved;
      reloadConfig();
    }
  });
});
