/**
 * Nothing lost, nothing collides: stop signals other than Ctrl-C, runs that share a folder, sizes that cannot
 * fit, large reports, peers that misbehave, hostile text in names and variables. Each CLI run is a child
 * process with a time limit.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import {
  chmodSync,
  lstatSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  symlinkSync,
  truncateSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { createFreshFolder } from '../../../src/cli/output-path.js';
import { writeReport } from '../../../src/report/write.js';
import { loadResults, writeFileAtomic } from '../../../src/results/files.js';

const root = fileURLToPath(new URL('../../..', import.meta.url));
const work = mkdtempSync(join(tmpdir(), 'attnlab-robust-'));
const env = { ...process.env, ATTNLAB_DISABLE_CUDA: '1', NO_COLOR: '1' };
const TINY = ['--seq', '16', '--heads', '2', '--head-dim', '16', '--batch', '1', '--impl', 'flash'];
const QUICK = ['--budget-ms', '2', '--repeats', '2', '--warmup', '0', '--settle-ms', '0', '--no-progress'];

interface Run {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
  ms: number;
}

/**
 * Runs the CLI; `stopWhen` sends `stopWith` once stderr+stdout match it. A run past `timeoutMs` is killed and
 * fails the test instead of hanging it.
 */
function cli(
  args: string[],
  options: { stopWhen?: RegExp; stopWith?: NodeJS.Signals; timeoutMs?: number; extraEnv?: object } = {},
): Promise<Run> {
  const t0 = Date.now();
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--import', 'tsx', 'src/cli/bin.ts', ...args], {
      cwd: root,
      env: { ...env, ...options.extraEnv },
    });
    let [stdout, stderr, sent] = ['', '', false];
    const watch = () => {
      if (!sent && options.stopWhen?.test(stdout + stderr)) {
        sent = true;
        child.kill(options.stopWith ?? 'SIGTERM');
      }
    };
    child.stdout.on('data', (d) => {
      stdout += d;
      watch();
    });
    child.stderr.on('data', (d) => {
      stderr += d;
      watch();
    });
    const limit = options.timeoutMs ?? 60_000;
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`attnlab ${args.join(' ')} did not end within ${limit} ms; stderr: ${stderr}`));
    }, limit);
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, stdout, stderr, ms: Date.now() - t0 });
    });
  });
}

describe('stop signals', () => {
  for (const [signal, code] of [
    ['SIGTERM', 143],
    ['SIGHUP', 129],
  ] as const) {
    it(`${signal} during bench saves the finished rows marked partial and exits ${code}`, async () => {
      const json = join(work, `${signal}.json`);
      const sweep = '--seq 16..4096 --heads 2 --head-dim 16 --batch 1 --impl reference,flash';
      const timing = '--budget-ms 20 --repeats 3 --warmup 0 --settle-ms 0';
      const r = await cli(['bench', ...`${sweep} ${timing}`.split(' '), '--json', json], {
        stopWhen: /^\[3\/18\]/m,
        stopWith: signal,
      });
      assert.equal(r.code, code, `ended by ${r.signal}; stderr: ${r.stderr}`);
      const saved = loadResults(json);
      assert.ok(saved.rows.length >= 2 && saved.rows.length < 18, `${saved.rows.length} rows`);
      assert.ok(
        saved.notes.some((n) => n.startsWith('interrupted: ') && n.endsWith(`(stopped by ${signal})`)),
        saved.notes.join(' | '),
      );
      assert.doesNotMatch(r.stderr, /\n\s+at /, 'no stack trace');
    });
  }

  it('SIGTERM during lab stops after the running section, saves lab.json marked interrupted, exits 143', async () => {
    const out = join(work, 'lab-stopped');
    const r = await cli(['lab', '--quick', '--budget-ms', '20', '--out', out], {
      stopWhen: /3\. Create the test arrays/,
      timeoutMs: 240_000,
    });
    assert.equal(r.code, 143, `ended by ${r.signal}; stderr: ${r.stderr}`);
    const saved = loadResults(join(out, 'lab.json'));
    const last = saved.notes.at(-1) ?? '';
    assert.match(
      last,
      /^interrupted: sections up to \S+ of 11 finished, the rest not run \(stopped by SIGTERM\)$/,
    );
    assert.ok(!saved.notes.some((n) => n.startsWith('partial: ')), 'the partial mark is replaced');
    assert.doesNotMatch(r.stdout, /11\. Beyond the codelab/);
  });
});

describe('output folders and files', () => {
  it('a run folder is made exclusively: a second run of the same name gets its own', () => {
    const base = join(work, 'runs', 'lab-20261206-040000');
    const first = createFreshFolder('--out', base);
    const second = createFreshFolder('--out', base);
    const third = createFreshFolder('--out', base);
    assert.deepEqual([first, second, third], [base, `${base}-2`, `${base}-3`]);
  });

  it('results files are replaced whole through a temporary name; a link stays a link', () => {
    const folder = mkdtempSync(join(work, 'atomic-'));
    const target = join(folder, 'target.json');
    const link = join(folder, 'link.json');
    writeFileSync(target, 'old');
    symlinkSync(target, link);
    writeFileAtomic(link, 'new');
    assert.equal(readFileSync(target, 'utf8'), 'new');
    assert.ok(lstatSync(link).isSymbolicLink());
    assert.equal(readlinkSync(link), target);
    assert.deepEqual(readdirSync(folder).sort(), ['link.json', 'target.json'], 'no temporary file left');
  });
});

describe('up-front limits', () => {
  it('a CPU case that cannot finish within --max-case-s is not run, and says so before anything runs', async () => {
    const sizes = ['--seq', '262144', '--heads', '2', '--head-dim', '16', '--batch', '1', '--impl', 'flash'];
    const r = await cli(['bench', ...sizes, ...QUICK, '--max-case-s', '60']);
    assert.equal(r.code, 1, r.stderr);
    const lines = r.stderr.trimEnd().split('\n');
    assert.match(
      lines[0],
      /^attnlab: bench: will not run attnlab flash bf16 1×262144×2×16: needs at least 2,639 s on the CPU \(3 calls of 8\.80e\+12 flops at ≤ 10 GFLOP\/s\), past --max-case-s 60$/,
    );
    assert.match(lines[1], /no row ran \(1 unsupported\)/);
    assert.ok(r.ms < 30_000, `${r.ms} ms`);
  });

  it('a results file past 256 MiB is refused before it is read, naming its size and the limit', () => {
    const huge = join(work, 'huge.json');
    writeFileSync(huge, '');
    truncateSync(huge, 300 * 2 ** 20); // sparse: no disk used
    assert.throws(
      () => loadResults(huge),
      (e: unknown) => e instanceof Error && /300\.00 MiB; at most 256\.00 MiB/.test(e.message),
    );
  });

  it('a sweep of millions of cases is refused before any work, naming its size and the limit', async () => {
    // Each list at its largest value (a size past it is refused by the list itself, cli.md's ranges).
    const [sizes, lengths] = ['1..65536', '1..16777216'];
    const r = await cli(['bench', '--batch', sizes, '--seq', lengths, '--heads', sizes, '--head-dim', sizes]);
    assert.equal(r.code, 1, r.stderr);
    assert.match(
      r.stderr,
      /at most 100,000 cases .* got 245,650 cases \(--batch 17 × --seq 25 × --heads 17 × --head-dim 17 × --impl 2\)/,
    );
    assert.ok(r.ms < 30_000, `${r.ms} ms`);
  });
});

/** `n` rows of a tiny bench's results, each of its own batch size, and the file written at `path`. */
function manyRows(template: ReturnType<typeof loadResults>, n: number, path: string): void {
  const row = template.rows[0];
  const rows = Array.from({ length: n }, (_, i) => ({ ...row, B: i + 1, flops: row.flops * (i + 1) }));
  for (const r of rows) r.tflops = r.flops / ((r.timing?.ms.median ?? 1) * 1e9);
  writeFileSync(
    path,
    JSON.stringify({ ...template, ceiling: null, rows: rows.map(({ ceilingPercent: _c, ...r }) => r) }),
  );
}

describe('report in linear time', () => {
  it('--no-terminal builds no terminal tables', () => {
    const text = writeReport([], { terminal: false });
    assert.equal(text, '');
  });

  it('report --no-terminal of 20,000 rows finishes, and repeated inputs are still refused', async () => {
    const tiny = join(work, 'tiny.json');
    const bench = await cli(['bench', ...TINY, ...QUICK, '--json', tiny]);
    assert.equal(bench.code, 0, bench.stderr);
    const big = join(work, 'big.json');
    manyRows(loadResults(tiny), 20_000, big);
    const r = await cli(['report', big, '--no-terminal', '-o', join(work, 'big.html')], {
      timeoutMs: 120_000,
    });
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout.trim(), `report: ${join(work, 'big.html')}`);
    const twice = await cli(['report', tiny, big, `${work}/./tiny.json`, '-o', join(work, 'twice.html')]);
    assert.equal(twice.code, 1);
    assert.match(twice.stderr, /<results>: expected a path that no other option or input names/);
  });
});

describe('peers that misbehave', () => {
  /** A stand-in interpreter: `-c` (the import probe) succeeds; run as a peer it does `body`. */
  const fakePython = (name: string, body: string): string => {
    const path = join(work, name);
    writeFileSync(path, `#!/bin/sh\nif [ "$1" = "-c" ]; then exit 0; fi\n${body}\n`);
    chmodSync(path, 0o755);
    return path;
  };

  it("malformed and invalid peer rows become 'unavailable' rows with the reason; attnlab's rows are saved", async () => {
    const python = fakePython(
      'bad-rows.sh',
      `cat > /dev/null; echo '{"versions": {"torch": "9.9"}, "rows": [5, null, {"source": "torch", "impl": "flash", "status": "ok"}]}'`,
    );
    const json = join(work, 'peers-bad.json');
    const r = await cli(['bench', ...TINY, ...QUICK, '--peers', 'torch', '--json', json], {
      extraEnv: { ATTNLAB_PYTHON: python },
    });
    assert.equal(r.code, 0, r.stderr);
    const saved = loadResults(json);
    assert.equal(saved.rows.filter((row) => row.source === 'attnlab').length, 1);
    const peerRows = saved.rows.filter((row) => row.source === 'torch');
    assert.ok(peerRows.length > 0);
    for (const row of peerRows) {
      assert.equal(row.status, 'unavailable');
      assert.match(row.reason ?? '', /3 invalid row\(s\).*first: row 0: not an object/);
    }
  });

  it('a peer that never answers is stopped after --peer-case-s, and the run goes on', async () => {
    const python = fakePython('silent.sh', 'sleep 600');
    const json = join(work, 'peers-silent.json');
    const r = await cli(
      ['bench', ...TINY, ...QUICK, '--peers', 'torch', '--peer-case-s', '2', '--json', json],
      {
        extraEnv: { ATTNLAB_PYTHON: python },
      },
    );
    assert.equal(r.code, 0, r.stderr);
    const saved = loadResults(json);
    assert.equal(saved.rows.length, 1);
    assert.ok(
      saved.notes.some((n) => /^peer torch not run: no answer within 2 s on its start/.test(n)),
      saved.notes.join(' | '),
    );
  });
});

describe('hostile text', () => {
  it('ATTNLAB_COMMIT with control characters reaches bench’s terminal written out', async () => {
    const r = await cli(['bench', ...TINY, ...QUICK], { extraEnv: { ATTNLAB_COMMIT: 'abc\u001b[2J\u0007' } });
    assert.equal(r.code, 0, r.stderr);
    assert.ok(!r.stdout.includes('\u001b'), 'no raw ESC');
    assert.match(r.stdout, /abc\\x1b\[2J\\x07/);
  });

  it('--name with a bidirectional override is refused, the override written out', async () => {
    const r = await cli(['bench', ...TINY, ...QUICK, '--name', 'a\u202enosj.exe', '--out', work]);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /--name: expected a name without bidirectional controls/);
    assert.match(r.stderr, /a\\u202enosj\.exe/);
    assert.doesNotMatch(r.stderr, /\u202e/);
  });
});
