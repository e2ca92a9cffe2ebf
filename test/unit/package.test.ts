/**
 * What the published package carries, in the tarball npm would publish (`npm pack --dry-run`, scripts
 * off so nothing is built): the licence package.json declares, the command's entry, and every page a
 * reader can follow a link to — each relative link of README and of the shipped docs resolves to a
 * shipped file (and heading), so it works from node_modules/attnlab as on GitHub. Links from the
 * benchmark pages into the repository's benchmarks/ results are the one exception: the results are not
 * shipped, so those must exist in the repository. The command line's help cites no page the package
 * lacks, and `--version` prints the version, with the commit only where one is known.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { posix } from 'node:path';
import { before, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('../../', import.meta.url));
const pkg = JSON.parse(readFileSync(`${root}package.json`, 'utf8'));
let files: string[] = [];

before(() => {
  const npm = process.platform === 'win32' ? 'npm.cmd' : 'npm';
  const pack = spawnSync(npm, ['pack', '--dry-run', '--json', '--ignore-scripts'], {
    cwd: root,
    encoding: 'utf8',
  });
  assert.equal(pack.status, 0, pack.stderr);
  files = (JSON.parse(pack.stdout)[0].files as { path: string }[]).map((f) => f.path);
});

/** GitHub's anchor for a heading: lower case, punctuation but '-' and '_' dropped, spaces to '-'. */
function slug(heading: string): string {
  return heading
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\s_-]/gu, '')
    .replace(/\s/g, '-');
}

function anchorsOf(markdown: string): Set<string> {
  const text = markdown.replace(/```[\s\S]*?```/g, '');
  return new Set([...text.matchAll(/^#{1,6}\s+(.+)$/gm)].map(([, heading]) => slug(heading)));
}

interface Link {
  readonly from: string;
  readonly target: string;
  readonly path: string;
  readonly anchor: string;
}

/** The relative links (and images) of a shipped Markdown file, code blocks and spans left out. */
function linksOf(file: string): Link[] {
  const text = readFileSync(`${root}${file}`, 'utf8')
    .replace(/```[\s\S]*?```/g, '')
    .replace(/`[^`\n]*`/g, '');
  const links: Link[] = [];
  for (const [, target] of text.matchAll(/!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)/g)) {
    if (/^[a-z]+:/i.test(target)) continue;
    const [pathPart, anchor = ''] = target.split('#');
    const path = pathPart === '' ? file : posix.normalize(posix.join(posix.dirname(file), pathPart));
    links.push({ from: file, target, path, anchor });
  }
  return links;
}

describe('package', () => {
  it('declares Apache-2.0 and ships its full text as LICENSE, with the bin entry', () => {
    assert.equal(pkg.license, 'Apache-2.0');
    const license = readFileSync(`${root}LICENSE`, 'utf8');
    assert.match(license, /^\s*Apache License\s+Version 2\.0, January 2004/);
    assert.match(license, /END OF TERMS AND CONDITIONS/);
    assert.ok(files.includes('LICENSE'), files.join('\n'));
    assert.ok(files.includes(pkg.bin.attnlab), files.join('\n'));
  });

  it('ships README, the docs, the examples, CHANGELOG.md and CONTRIBUTING.md', () => {
    for (const file of ['README.md', 'CHANGELOG.md', 'CONTRIBUTING.md', 'docs/guide/README.md']) {
      assert.ok(files.includes(file), `${file} is not in the package`);
    }
    assert.ok(
      files.some((f) => f.startsWith('examples/')),
      'no examples/ in the package',
    );
  });

  it('every relative link of README and the shipped docs resolves in the package', () => {
    const pages = files.filter((f) => f.endsWith('.md') && !f.startsWith('src/') && !f.startsWith('dist/'));
    assert.ok(pages.includes('README.md'));
    const broken: string[] = [];
    for (const link of pages.flatMap(linksOf)) {
      const where = `${link.from}: (${link.target})`;
      const shipped = files.includes(link.path) || files.some((f) => f.startsWith(`${link.path}/`));
      const results = /^(benchmarks|bench)\//.test(link.path) && link.from !== 'README.md';
      if (results ? !existsSync(`${root}${link.path}`) : !shipped) {
        broken.push(`${where} → ${link.path} is ${results ? 'not in the repository' : 'not in the package'}`);
        continue;
      }
      if (link.anchor && link.path.endsWith('.md') && files.includes(link.path)) {
        const anchors = anchorsOf(readFileSync(`${root}${link.path}`, 'utf8'));
        if (!anchors.has(link.anchor)) broken.push(`${where} → no heading #${link.anchor} in ${link.path}`);
      }
    }
    assert.deepEqual(broken, []);
  });

  it('the command line cites only files the package ships', () => {
    for (const command of [
      '--help',
      'bench --help',
      'lab --help',
      'check --help',
      'report --help',
      'info --help',
    ]) {
      const run = spawnSync(process.execPath, ['--import', 'tsx', 'src/cli/bin.ts', ...command.split(' ')], {
        cwd: root,
        encoding: 'utf8',
        env: { ...process.env, ATTNLAB_DISABLE_CUDA: '1', NO_COLOR: '1' },
      });
      assert.equal(run.status, 0, run.stderr);
      for (const [cited] of run.stdout.matchAll(/[\w./-]+\.md\b/g)) {
        assert.ok(
          files.includes(cited),
          `attnlab ${command} cites ${cited}, which the package does not ship`,
        );
      }
    }
  });

  it('--version prints the version, with the commit only where one is known', () => {
    const version = (env: Record<string, string>) =>
      spawnSync(process.execPath, ['--import', 'tsx', 'src/cli/bin.ts', '--version'], {
        cwd: root,
        encoding: 'utf8',
        env: { ...process.env, ...env },
      });
    const given = version({ ATTNLAB_COMMIT: 'abc1234' });
    assert.equal(given.status, 0, given.stderr);
    assert.equal(given.stdout, `${pkg.version} (abc1234)\n`);
    const found = version({ ATTNLAB_COMMIT: '' });
    assert.equal(found.status, 0, found.stderr);
    assert.match(
      found.stdout,
      new RegExp(`^${pkg.version.replace(/\./g, '\\.')}( \\([0-9a-f]{7,}(-dirty)?\\))?\\n$`),
    );
    assert.doesNotMatch(found.stdout, /unknown/);
  });
});
