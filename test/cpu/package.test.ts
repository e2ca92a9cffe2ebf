/**
 * What the published package carries: the licence package.json declares, in the tarball npm would
 * publish (`npm pack --dry-run`, scripts off so nothing is built), and the command's entry.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('../../', import.meta.url));

describe('package', () => {
  it('declares Apache-2.0 and ships its full text as LICENSE, with the bin entry', () => {
    const pkg = JSON.parse(readFileSync(`${root}package.json`, 'utf8'));
    assert.equal(pkg.license, 'Apache-2.0');
    const license = readFileSync(`${root}LICENSE`, 'utf8');
    assert.match(license, /^\s*Apache License\s+Version 2\.0, January 2004/);
    assert.match(license, /END OF TERMS AND CONDITIONS/);
    const npm = process.platform === 'win32' ? 'npm.cmd' : 'npm';
    const pack = spawnSync(npm, ['pack', '--dry-run', '--json', '--ignore-scripts'], {
      cwd: root,
      encoding: 'utf8',
    });
    assert.equal(pack.status, 0, pack.stderr);
    const files = (JSON.parse(pack.stdout)[0].files as { path: string }[]).map((f) => f.path);
    assert.ok(files.includes('LICENSE'), files.join('\n'));
    assert.ok(files.includes(pkg.bin.attnlab), files.join('\n'));
  });
});
