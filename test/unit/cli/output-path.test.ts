/** The output-path check and the one-line failure text, as functions. */
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { describeFailure } from '../../../src/cli/failure.js';
import { checkOutputDir, checkOutputFile } from '../../../src/cli/output-path.js';
import { reloadConfig } from '../../../src/config.js';
import { InvalidArgumentError, UnsupportedError } from '../../../src/errors.js';

describe('checkOutputFile and checkOutputDir', () => {
  const work = mkdtempSync(join(tmpdir(), 'attnlab-paths-'));

  it('leave nothing behind: no folder made, an existing file unchanged, no probe file left', () => {
    checkOutputFile('--json', join(work, 'new', 'deeper', 'r.json'));
    assert.equal(existsSync(join(work, 'new')), false);
    const kept = join(work, 'kept.json');
    writeFileSync(kept, 'old content');
    checkOutputFile('--json', kept);
    assert.equal(readFileSync(kept, 'utf8'), 'old content');
    checkOutputDir('--out', work);
    assert.deepEqual(readdirSync(work).sort(), ['kept.json']);
  });

  it('name the option, the path and the reason', () => {
    const file = join(work, 'plain');
    writeFileSync(file, '');
    assert.throws(
      () => checkOutputDir('--out', join(file, 'x')),
      (e: unknown) =>
        e instanceof InvalidArgumentError &&
        e.argument === '--out' &&
        e.message.includes(JSON.stringify(join(file, 'x'))) &&
        e.message.includes(`${file} is a file, not a folder`),
    );
    assert.throws(() => checkOutputDir('--out', file), /--out: .* is a file, not a folder/);
    assert.throws(() => checkOutputFile('--html', work), /--html: expected a file path, got .* is a folder/);
    assert.throws(
      () => checkOutputFile('-o', '/proc/1/x.html'),
      /-o: .*\/proc is the kernel’s process filesystem/,
    );
    assert.throws(() => checkOutputDir('--out', '/sys/attnlab'), /\/sys is the kernel’s device filesystem/);
  });

  it('follow a symbolic link into /proc to name it', () => {
    const link = join(work, 'to-proc');
    symlinkSync('/proc', link);
    assert.throws(() => checkOutputFile('--json', join(link, 'new-dir', 'x.json')), /\/proc is the kernel/);
  });
});

describe('describeFailure', () => {
  it('is one line for an AttnlabError and for a bug, with the stack only under ATTNLAB_DEBUG', () => {
    assert.equal(
      describeFailure(new UnsupportedError('cudnn', 'float32')),
      'attnlab: UnsupportedError: cudnn cannot run this case: float32',
    );
    const saved = process.env.ATTNLAB_DEBUG;
    try {
      delete process.env.ATTNLAB_DEBUG;
      reloadConfig();
      const bug = describeFailure(new TypeError("Cannot read properties of undefined (reading 'x')\nmore"));
      assert.equal(
        bug,
        "attnlab: unexpected error (a bug in attnlab): TypeError: Cannot read properties of undefined (reading 'x') (ATTNLAB_DEBUG=1 for the stack)",
      );
      process.env.ATTNLAB_DEBUG = '1';
      reloadConfig();
      assert.match(describeFailure(new TypeError('boom')), /\n {4}at /);
    } finally {
      if (saved === undefined) delete process.env.ATTNLAB_DEBUG;
      else process.env.ATTNLAB_DEBUG = saved;
      reloadConfig();
    }
  });
});
