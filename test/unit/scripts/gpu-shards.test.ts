/**
 * Every test under test/gpu/ runs in some shard of scripts/gpu-verify.sh, and every shard and sanitizer run
 * runs some test: the script runs with a fake `node` (and `compute-sanitizer`) that records its arguments,
 * every GPU test file is listed without running (test/support/test-names/list.ts), and each test's name path
 * is matched against the shards' files and --test-name-pattern as node does (a test runs when its name or a
 * suite's above it matches). The shards split big files by pattern; a pattern that misses a group of tests
 * (the flash suite's 80 tf32 rows, were the float32 shard to name float32 alone) fails here.
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
import type { RecordedTest } from '../../support/test-names/recorder.js';

const root = fileURLToPath(new URL('../../../', import.meta.url));
const work = mkdtempSync(join(tmpdir(), 'attnlab-gpu-shards-'));
after(() => rmSync(work, { recursive: true, force: true }));

// Appends its arguments to $FAKE_CALLS: one line a call (one write, as shards run at once), the arguments
// NUL-separated in base64.
const FAKE_NODE = `#!/usr/bin/env bash
line=$(printf '%s\\0' "$@" | base64 -w0)
echo "$line" >> "$FAKE_CALLS"
echo "TAP version 13"
echo "# pass 0"
`;
const FAKE_SANITIZER = `#!/usr/bin/env bash
while [ "$1" != node ]; do shift; done
"$@"
`;

interface ShardCall {
  readonly files: readonly string[];
  readonly patterns: readonly RegExp[];
}

function shardCalls(): ShardCall[] {
  // A copy of what the script reads (scripts/, the paths under test/gpu/): no .kcache to unpack.
  const tree = join(work, 'tree');
  const bin = join(work, 'bin');
  for (const dir of [join(tree, 'scripts'), bin]) mkdirSync(dir, { recursive: true });
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
  const calls = join(work, 'calls.jsonl');
  const result = spawnSync('bash', ['scripts/gpu-verify.sh', join(work, 'out'), '20'], {
    cwd: tree,
    encoding: 'utf8',
    env: {
      ...process.env,
      PATH: `${bin}:${process.env.PATH}`,
      FAKE_CALLS: calls,
    },
    timeout: 120_000,
  });
  assert.equal(result.status, 0, result.stderr);
  return readFileSync(calls, 'utf8')
    .trim()
    .split('\n')
    .map((line) => Buffer.from(line, 'base64').toString('utf8').split('\0').slice(0, -1))
    .map((args) => ({
      files: args.filter((a) => a.endsWith('.test.ts') && !a.startsWith('-')),
      patterns: args
        .filter((a) => a.startsWith('--test-name-pattern='))
        .map((a) => new RegExp(a.split('=').slice(1).join('='))),
    }));
}

function gpuTests(): RecordedTest[] {
  const files = readdirSync(join(root, 'test/gpu'), { recursive: true, encoding: 'utf8' })
    .filter((f) => f.endsWith('.test.ts'))
    .map((f) => `test/gpu/${f}`)
    .sort();
  const listed = spawnSync(
    process.execPath,
    ['--import', 'tsx', 'test/support/test-names/list.ts', ...files],
    { cwd: root, encoding: 'utf8', timeout: 120_000, maxBuffer: 64 * 2 ** 20 },
  );
  assert.equal(listed.status, 0, listed.stderr);
  return JSON.parse(listed.stdout.trim().split('\n').at(-1) ?? '[]') as RecordedTest[];
}

describe('GPU shards of scripts/gpu-verify.sh', () => {
  const missing = ['timeout', 'tar', 'xz', 'base64'].filter(
    (c) => spawnSync('bash', ['-c', `command -v ${c}`]).status !== 0,
  );
  const skip = missing.length > 0 ? `needs ${missing.join(', ')}` : false;
  let listed: { calls: ShardCall[]; tests: RecordedTest[] } | undefined;
  const both = () => {
    listed ??= { calls: shardCalls(), tests: gpuTests().filter((t) => t.error === undefined) };
    return listed;
  };
  const runs = (t: RecordedTest, call: ShardCall) =>
    call.files.includes(t.file) &&
    (call.patterns.length === 0 || t.path.some((name) => call.patterns.some((p) => p.test(name))));

  test('every GPU test is in a shard', { skip }, () => {
    const { calls, tests } = both();
    assert.ok(tests.length > 1500, `listed ${tests.length} GPU tests`);
    const orphans = tests.filter((t) => !calls.some((call) => runs(t, call)));
    assert.deepEqual(
      orphans.slice(0, 20).map((t) => `${t.file}: ${t.path.join(' › ')}`),
      [],
      `${orphans.length} GPU tests in no shard`,
    );
  });

  test('every shard and sanitizer run runs some test (a pattern that matches none passes on nothing)', {
    skip,
  }, () => {
    const { calls, tests } = both();
    // A file whose suite needs a GPU to define its tests (it throws while listing) is left out.
    const listedFiles = new Set(tests.map((t) => t.file));
    const empty = calls.filter(
      (call) => call.files.every((f) => listedFiles.has(f)) && !tests.some((t) => runs(t, call)),
    );
    assert.deepEqual(
      empty.map((call) => `${call.files.join(' ')} ${call.patterns.join(' ')}`),
      [],
    );
  });
});
