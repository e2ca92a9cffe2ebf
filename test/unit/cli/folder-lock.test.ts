/**
 * One lab per output folder: the lock is made with O_EXCL, names its owner's pid, is removed when the run ends
 * (by any path), and a lock whose owner has ended is taken over.
 */
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { LOCK_FILE, lockFolder } from '../../../src/cli/folder-lock.js';
import { InvalidArgumentError } from '../../../src/errors.js';

const root = fileURLToPath(new URL('../../..', import.meta.url));
const work = mkdtempSync(join(tmpdir(), 'attnlab-lock-'));

/** A pid that no process has now: a child that has exited. */
function endedPid(): number {
  const child = spawnSync(process.execPath, ['-e', 'process.stdout.write(String(process.pid))']);
  return Number(child.stdout.toString());
}

describe('lockFolder', () => {
  it('a second lock on a held folder is refused, naming the holder; released, it can be taken again', () => {
    const folder = join(work, 'held');
    const first = lockFolder('--out', folder, 'attnlab lab');
    assert.match(
      readFileSync(join(folder, LOCK_FILE), 'utf8'),
      new RegExp(`^pid ${process.pid}\\nattnlab lab since `),
    );
    // The same process counts as the holder only through its own handle: a child process is a real second run.
    const other = spawnSync(
      process.execPath,
      [
        '--import',
        'tsx',
        '-e',
        `import('./src/cli/folder-lock.ts').then(({ lockFolder }) => { try { lockFolder('--out', ${JSON.stringify(folder)}, 'x'); console.log('taken'); } catch (e) { console.log(e.name + ': ' + e.message); } })`,
      ],
      { cwd: root, encoding: 'utf8' },
    );
    assert.match(
      other.stdout,
      new RegExp(
        `InvalidArgumentError: --out: expected a folder no other attnlab run is writing, got .*in use by process ${process.pid}`,
      ),
    );
    first.release();
    assert.equal(existsSync(join(folder, LOCK_FILE)), false);
    const second = lockFolder('--out', folder, 'attnlab lab');
    assert.equal(second.tookOver, null);
    second.release();
  });

  it('a stale lock (its pid ended, or no pid in it) is taken over and said so', () => {
    for (const [name, text, why] of [
      ['stale-pid', `pid ${endedPid()}\nattnlab lab since then\n`, /has ended/],
      ['stale-garbage', 'not a lock\n', /no pid in it/],
    ] as const) {
      const folder = join(work, name);
      lockFolder('--out', folder, 'x').release();
      writeFileSync(join(folder, LOCK_FILE), text);
      const lock = lockFolder('--out', folder, 'attnlab lab');
      assert.match(lock.tookOver ?? '', why);
      assert.match(readFileSync(join(folder, LOCK_FILE), 'utf8'), new RegExp(`^pid ${process.pid}\\n`));
      lock.release();
    }
  });

  it('a folder that cannot be made is a typed error naming the option', () => {
    const file = join(work, 'a-file');
    writeFileSync(file, '');
    assert.throws(
      () => lockFolder('--out', join(file, 'sub'), 'x'),
      (e) =>
        e instanceof InvalidArgumentError &&
        e.argument === '--out' &&
        /a folder attnlab can lock/.test(e.message),
    );
  });
});

describe('two labs into one --out folder', () => {
  it('the second fails at once with a clear error; the first finishes and removes its lock', async () => {
    const out = join(work, 'shared');
    const env = { ...process.env, ATTNLAB_DISABLE_CUDA: '1', NO_COLOR: '1' };
    const args = ['--import', 'tsx', 'src/cli/bin.ts', 'lab', '--quick', '--budget-ms', '5', '--out', out];
    const first = spawn(process.execPath, args, { cwd: root, env });
    let firstOut = '';
    first.stdout.on('data', (d) => {
      firstOut += d;
    });
    const firstDone = new Promise<number | null>((resolve) => first.on('close', resolve));
    // The lock exists from before the first section: wait for the first section's heading.
    const t0 = Date.now();
    while (!/2\. /.test(firstOut) && Date.now() - t0 < 60_000) await new Promise((r) => setTimeout(r, 100));
    assert.ok(existsSync(join(out, LOCK_FILE)), 'the first lab holds the lock');
    const second = spawnSync(process.execPath, args, { cwd: root, env, encoding: 'utf8', timeout: 60_000 });
    assert.equal(second.status, 1, second.stderr);
    assert.match(
      second.stderr,
      /--out: expected a folder no other attnlab run is writing, got .*in use by process \d+/,
    );
    assert.doesNotMatch(second.stdout, /2\. /, 'the second ran no section');
    first.kill('SIGTERM');
    assert.equal(await firstDone, 143);
    assert.equal(existsSync(join(out, LOCK_FILE)), false, 'the lock is removed when the lab ends');
    assert.ok(existsSync(join(out, 'lab.json')));
  });
});
