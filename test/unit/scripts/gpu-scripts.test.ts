/**
 * The device scripts, without a GPU: every shell script parses (`bash -n`), and scripts/gpu-verify.sh
 * — the one command that verifies the GPU suite — runs to its summary table with a fake `node` and a fake
 * `compute-sanitizer` on PATH, so that an edit to it or to scripts/gpu-lib.sh that would cost a device
 * run (a missing function, a broken table, variables not reaching a shard) fails here first; and
 * scripts/device/pack.sh with scripts/device/on-gpu.sh, the pair that brings Node.js to a GPU machine
 * without it, round-trips a fake `node`, npm and node_modules.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import {
  chmodSync,
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('../../../', import.meta.url));

function shellScripts(dir: string): string[] {
  if (!existsSync(dir)) return [];
  return readdirSync(dir, { recursive: true, encoding: 'utf8' })
    .filter((path) => path.endsWith('.sh'))
    .map((path) => join(dir, path));
}

function missing(commands: string[]): string[] {
  return commands.filter((c) => spawnSync('bash', ['-c', `command -v ${c}`]).status !== 0);
}

// One test: a failure where the arguments name forward/nan.test.ts; the skipped count says whether
// ATTNLAB_FLASH_KERNEL=wgmma reached the process (1) or not (0).
const FAKE_NODE = `#!/usr/bin/env bash
echo "TAP version 13"
case "$*" in */forward/nan.test*) echo "not ok 1 - fake failure";; *) echo "ok 1 - fake";; esac
echo "# pass 1"
case "$*" in */forward/nan.test*) echo "# fail 1";; *) echo "# fail 0";; esac
[ "\${ATTNLAB_FLASH_KERNEL-}" = wgmma ] && echo "# skipped 1" || echo "# skipped 0"
`;
const FAKE_SANITIZER = `#!/usr/bin/env bash
tool=
while [ "$1" != node ]; do [ "$1" = --tool ] && tool=$2; shift; done
"$@"
echo "========= ERROR SUMMARY: 0 errors ($tool kernel=\${ATTNLAB_FLASH_KERNEL-default})"
`;

const work = mkdtempSync(join(tmpdir(), 'attnlab-gpu-scripts-'));
after(() => rmSync(work, { recursive: true, force: true }));

describe('device scripts', () => {
  test('every shell script parses (bash -n)', () => {
    const scripts = ['scripts', 'benchmarks', 'bench'].flatMap((dir) => shellScripts(join(root, dir)));
    assert.ok(scripts.some((s) => s.endsWith('gpu-verify.sh')));
    assert.ok(scripts.some((s) => s.endsWith('device/on-gpu.sh')));
    for (const script of scripts) {
      const result = spawnSync('bash', ['-n', script], { encoding: 'utf8' });
      assert.equal(result.status, 0, `${script}: ${result.stderr}`);
    }
  });

  test('gpu-verify.sh runs every shard and sanitizer to its summary table (fake node)', (t) => {
    const absent = missing(['timeout', 'tar', 'xz']);
    if (absent.length > 0) {
      t.skip(`needs ${absent.join(', ')} on PATH`);
      return;
    }
    // A copy of what the script reads (scripts/, the paths under test/gpu/), and no .kcache to unpack.
    const tree = join(work, 'tree');
    const bin = join(work, 'bin');
    const out = join(work, 'out');
    for (const dir of [join(tree, 'scripts'), join(tree, 'test/gpu'), bin, out])
      mkdirSync(dir, { recursive: true });
    for (const file of ['gpu-verify.sh', 'gpu-lib.sh', 'gpu-steps.sh'])
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

    const result = spawnSync('bash', ['scripts/gpu-verify.sh', out, '20'], {
      cwd: tree,
      encoding: 'utf8',
      env: { ...process.env, PATH: `${bin}:${process.env.PATH}` },
      timeout: 60_000,
    });
    assert.equal(result.status, 0, result.stderr);
    const table = result.stdout.slice(result.stdout.indexOf('== summary'));
    assert.ok(table.length > 0, result.stdout);
    const row = (name: string) => table.split('\n').find((line) => line.split(/\s+/)[0] === name) ?? '';

    for (const shard of ['rest', 'flash-float32', 'flash-bfloat16', 'backward-flash', 'decode', 'timing'])
      assert.match(row(shard), /pass=1 fail=0 skipped=0 +rc=0$/, `${shard} in\n${table}`);
    assert.match(row('nan'), /pass=1 fail=1 skipped=0 +rc=0$/, table);
    assert.match(row('wgmma-bfloat16'), /skipped=1 /, `the shard's variables reach node:\n${table}`);
    // The step groups gpu-verify.sh shares with other device scripts (scripts/gpu-steps.sh) run too.
    for (const shard of ['wgmma-float16', 'wgmma-other'])
      assert.match(row(shard), /pass=1 fail=0 skipped=1 +rc=0$/, `${shard} in\n${table}`);
    for (const tool of ['memcheck', 'racecheck', 'synccheck'])
      assert.match(
        row(`${tool}-hopper-dynamic`),
        new RegExp(`\\(${tool} kernel=default\\) +pass=1 fail=0 +rc=0$`),
        table,
      );
    assert.match(row('memcheck-hopper-long'), /\(memcheck kernel=default\) +pass=1 fail=0 +rc=0$/, table);
    assert.match(
      row('memcheck-fp8'),
      /ERROR SUMMARY: 0 errors \(memcheck kernel=default\) +pass=1 fail=0 +rc=0$/,
    );
    assert.match(
      row('synccheck-hopper'),
      /\(synccheck kernel=wgmma\)/,
      `a prefix variable reaches sanitize:\n${table}`,
    );
    assert.match(table, /^not ok 1 - fake failure$/m);
    assert.ok(existsSync(join(out, 'logs.tar.xz')), 'the logs come back as one archive');
    assert.deepEqual(
      readdirSync(out).filter((f) => /\.(tap|san)$/.test(f)),
      [],
      'the logs are deleted after archiving',
    );
  });

  test('scripts/device/pack.sh packs .device/ and on-gpu.sh runs a command with what it packed (fake node)', (t) => {
    const absent = missing(['git', 'tar', 'xz']);
    if (absent.length > 0) {
      t.skip(`needs ${absent.join(', ')} on PATH`);
      return;
    }
    // A project of its own (pack.sh works from the git root) with a node_modules folder, and a fake
    // `node` and npm on PATH: pack.sh compresses whatever `node` is, and the runner only starts it.
    const project = join(work, 'pack-project');
    const tools = join(work, 'pack-tools');
    const nodeDir = join(work, 'unpacked-node');
    mkdirSync(join(project, 'scripts/device'), { recursive: true });
    mkdirSync(join(project, 'node_modules/some-package'), { recursive: true });
    mkdirSync(join(tools, 'bin'), { recursive: true });
    mkdirSync(join(tools, 'npm/bin'), { recursive: true });
    for (const file of ['pack.sh', 'on-gpu.sh'])
      copyFileSync(join(root, 'scripts/device', file), join(project, 'scripts/device', file));
    writeFileSync(join(project, 'node_modules/some-package/index.js'), 'export default 1;\n');
    writeFileSync(join(project, 'package-lock.json'), '{}\n');
    writeFileSync(
      join(tools, 'bin/node'),
      '#!/bin/sh\ncase "$1" in *npm-cli.js) echo 10.0.0-fake;; *) echo v20.0.0-fake;; esac\n',
    );
    writeFileSync(join(tools, 'npm/bin/npm-cli.js'), '// the fake node answers for npm\n');
    chmodSync(join(tools, 'bin/node'), 0o755);
    // pack.sh finds npm's folder by resolving the `npm` on PATH: bin/npm → npm/bin/npm-cli.js.
    symlinkSync(join(tools, 'npm/bin/npm-cli.js'), join(tools, 'bin/npm'));
    const env = { ...process.env, PATH: `${join(tools, 'bin')}:${process.env.PATH}` };
    assert.equal(spawnSync('git', ['init', '-q'], { cwd: project }).status, 0);

    const pack = spawnSync('sh', ['scripts/device/pack.sh'], { cwd: project, encoding: 'utf8', env });
    assert.equal(pack.status, 0, pack.stderr);
    for (const file of ['node.xz', 'npm.tar.xz', 'node_modules.tar.xz', 'on-gpu.sh'])
      assert.ok(existsSync(join(project, '.device', file)), `.device/${file}`);

    // On the GPU machine: a copy without node_modules gets it back from the archive.
    rmSync(join(project, 'node_modules'), { recursive: true });
    const run = spawnSync(
      'bash',
      [
        '.device/on-gpu.sh',
        'sh',
        '-c',
        'command -v node; node --version; npm --version; echo "$LD_LIBRARY_PATH"',
      ],
      { cwd: project, encoding: 'utf8', env: { ...env, ATTNLAB_DEVICE_NODE_DIR: nodeDir } },
    );
    assert.equal(run.status, 0, run.stderr);
    const [nodePath, nodeVersion, npmVersion, libraryPath] = run.stdout.trim().split('\n');
    assert.equal(nodePath, join(nodeDir, 'bin/node'), 'the unpacked node comes first on PATH');
    assert.equal(nodeVersion, 'v20.0.0-fake');
    assert.equal(npmVersion, '10.0.0-fake', 'npm runs through the unpacked node');
    assert.match(libraryPath, /^\/usr\/local\/cuda\/lib64:/);
    assert.match(run.stderr, /^on-gpu: node v20\.0\.0-fake, npm 10\.0\.0-fake/);
    assert.ok(existsSync(join(project, 'node_modules/some-package/index.js')), 'node_modules unpacked');
  });
});
