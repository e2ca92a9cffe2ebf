/**
 * The CLI failing cleanly, as a user meets it: bad output paths, impossible numbers, runs in which
 * nothing can run, a closed pipe, hostile text in a results file. Each case is a child process
 * with a time limit (a /proc path once hung forever), and each failure must be one line on stderr
 * with exit code 1 and no Node stack trace.
 */
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import {
  chmodSync,
  closeSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readFileSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('../../..', import.meta.url));
const work = mkdtempSync(join(tmpdir(), 'attnlab-fail-'));
const env = { ...process.env, ATTNLAB_DISABLE_CUDA: '1', NO_COLOR: '1' };
/** A tiny CPU sweep: one shape, one backend, a few ms. */
const TINY = ['--seq', '16', '--heads', '2', '--head-dim', '16', '--batch', '1', '--impl', 'flash'];
const QUICK = ['--budget-ms', '2', '--repeats', '2', '--warmup', '0', '--no-progress'];

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs the CLI; a run past `timeoutMs` is killed and fails the test instead of hanging it. */
function cli(args: string[], options: { closeStdout?: boolean; timeoutMs?: number } = {}): Promise<Run> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--import', 'tsx', 'src/cli/bin.ts', ...args], { cwd: root, env });
    let stdout = '';
    let stderr = '';
    if (options.closeStdout) child.stdout.destroy();
    else child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`attnlab ${args.join(' ')} did not end within ${options.timeoutMs ?? 30_000} ms`));
    }, options.timeoutMs ?? 30_000);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

/** A tiny bench's results file, written at `path`, as parsed JSON to be made hostile. */
// biome-ignore lint/suspicious/noExplicitAny: the callers write fields of any type into it.
async function tinyResults(path: string): Promise<Record<string, any>> {
  const bench = await cli(['bench', ...TINY, ...QUICK, '--json', path]);
  assert.equal(bench.code, 0, bench.stderr);
  return JSON.parse(readFileSync(path, 'utf8'));
}

/** Exit 1, one line on stderr naming `pattern`, no stack frames. */
function assertOneLineFailure(r: Run, pattern: RegExp): void {
  assert.equal(r.code, 1, `exit code (stderr: ${r.stderr})`);
  const lines = r.stderr.trimEnd().split('\n');
  assert.equal(lines.length, 1, `one line, got:\n${r.stderr}`);
  assert.match(lines[0], pattern);
  assert.doesNotMatch(r.stderr, /^\s+at |node:internal|Node\.js v/m);
}

describe('output paths are checked before any work starts', () => {
  const aFile = join(work, 'a-file');
  writeFileSync(aFile, 'not a folder');

  it('a path under /proc: one line, at once, for bench, lab and report', async () => {
    const runs = await Promise.all([
      cli(['bench', ...TINY, ...QUICK, '--out', '/proc/attnlab-x'], { timeoutMs: 20_000 }),
      cli(['lab', '--out', '/proc/attnlab-x'], { timeoutMs: 20_000 }),
      cli(['report', 'whatever.json', '-o', '/proc/attnlab-x/r.html'], { timeoutMs: 20_000 }),
      cli(['bench', ...TINY, ...QUICK, '--json', '/proc/self/attnlab.json'], { timeoutMs: 20_000 }),
    ]);
    assertOneLineFailure(
      runs[0],
      /^attnlab: InvalidArgumentError: --out: .*"\/proc\/attnlab-x".*\/proc is the kernel/,
    );
    assertOneLineFailure(runs[1], /--out: .*\/proc/);
    assertOneLineFailure(runs[2], /--output: .*\/proc/);
    assertOneLineFailure(runs[3], /--json: .*\/proc/);
    // Before any work: no progress line, no table.
    for (const r of runs) assert.equal(r.stdout, '');
  });

  it('a path through a file, and a file path that is a folder', async () => {
    const [through, folder, outIsFile] = await Promise.all([
      cli(['bench', ...TINY, ...QUICK, '--json', join(aFile, 'x.json')]),
      cli(['bench', ...TINY, ...QUICK, '--html', work]),
      cli(['lab', '--out', aFile]),
    ]);
    assertOneLineFailure(through, /--json: .*a-file is a file, not a folder/);
    assertOneLineFailure(folder, /--html: .* is a folder/);
    assertOneLineFailure(outIsFile, /--out: .*a-file is a file, not a folder/);
  });

  it('a name too long for the file system, a FIFO, a link into /proc: refused before any work', async () => {
    const long = 'n'.repeat(300);
    const fifo = join(work, 'fifo');
    spawnSync('mkfifo', [fifo]);
    const toProc = join(work, 'to-proc.json');
    symlinkSync('/proc/self/status', toProc);
    const runs = await Promise.all([
      cli(['bench', ...TINY, ...QUICK, '--out', join(work, 'o'), '--name', long]),
      cli(['bench', ...TINY, ...QUICK, '--json', join(work, 'new', `${long}.json`)]),
      cli(['lab', '--out', join(work, long)]),
      // A FIFO that nothing reads: report waited forever on it at the end.
      cli(['report', 'whatever.json', '-o', fifo], { timeoutMs: 20_000 }),
      cli(['bench', ...TINY, ...QUICK, '--json', toProc]),
    ]);
    assertOneLineFailure(runs[0], /--out: .*\(a name of 305 bytes; at most 255 fit\)/);
    assertOneLineFailure(runs[1], /--json: .*\(a name of 305 bytes; at most 255 fit\)/);
    assertOneLineFailure(runs[2], /--out: .*\(a name of 300 bytes; at most 255 fit\)/);
    assertOneLineFailure(runs[3], /--output: .*fifo is a FIFO \(named pipe\)/);
    assertOneLineFailure(runs[4], /--json: .*to-proc\.json.*\/proc is the kernel/);
    for (const r of runs) assert.equal(r.stdout, '', 'before any work');
  });

  it('a loop of symbolic links, and a file path ending in /: refused before any work', async () => {
    const loop = join(work, 'loop');
    symlinkSync(loop, loop);
    const runs = await Promise.all([
      cli(['bench', ...TINY, ...QUICK, '--json', loop]),
      cli(['bench', ...TINY, ...QUICK, '--out', join(loop, 'sub')]),
      cli(['bench', ...TINY, ...QUICK, '--json', join(work, 'new-folder/')]),
      cli(['report', 'whatever.json', '-o', `${work}/r/`]),
    ]);
    assertOneLineFailure(runs[0], /--json: .*loop: a loop of symbolic links \(ELOOP\)\)$/);
    assertOneLineFailure(runs[1], /--out: .*loop\/sub: a loop of symbolic links \(ELOOP\)\)$/);
    assertOneLineFailure(
      runs[2],
      /--json: expected a file path, got .*new-folder\/ ends in a folder separator/,
    );
    assertOneLineFailure(runs[3], /--output: expected a file path, got .*r\/ ends in a folder separator/);
    for (const r of runs) assert.equal(r.stdout, '', 'before any work');
  });

  it('a path holding a control character is printed inert in the closing lines', async () => {
    const r = await cli(['bench', ...TINY, ...QUICK, '--json', join(work, 'e\u001b[2J.json')]);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /^results: .*e\\x1b\[2J\.json$/m);
    // biome-ignore lint/suspicious/noControlCharactersInRegex: finding control characters is the point
    assert.doesNotMatch(r.stdout, /\u001b/);
  });

  it('a write that fails after the run (a full disk) is one line too', async () => {
    const r = await cli(['bench', ...TINY, ...QUICK, '--json', '/dev/full']);
    assertOneLineFailure(
      r,
      /--json: .*"\/dev\/full" \(writing failed: no space left on the device \(ENOSPC\)\)/,
    );
  });

  it('a folder without write permission', {
    skip: process.getuid?.() === 0 && 'root may write anywhere',
  }, async () => {
    const locked = join(work, 'locked');
    mkdirSync(locked);
    chmodSync(locked, 0o555);
    const r = await cli(['bench', ...TINY, ...QUICK, '--out', join(locked, 'sub')]);
    assertOneLineFailure(r, /--out: .*permission denied/);
  });
});

describe('a bad ATTNLAB_* value', () => {
  it('is one line naming the variable before any work, not the defaults run unsaid', async () => {
    const r = await new Promise<Run>((resolve) => {
      const child = spawn(
        process.execPath,
        ['--import', 'tsx', 'src/cli/bin.ts', 'bench', ...TINY, ...QUICK],
        {
          cwd: root,
          env: { ...env, ATTNLAB_FLASH_KERNEL: 'bogus' },
        },
      );
      let [stdout, stderr] = ['', ''];
      child.stdout.on('data', (d) => (stdout += d));
      child.stderr.on('data', (d) => (stderr += d));
      child.on('close', (code) => resolve({ code, stdout, stderr }));
    });
    assertOneLineFailure(
      r,
      /^attnlab: InvalidArgumentError: ATTNLAB_FLASH_KERNEL: expected one of wgmma, mma \(or unset\), got "bogus"$/,
    );
    assert.equal(r.stdout, '');
  });
});

describe('runs in which nothing can run', () => {
  it('bench with no runnable row exits 1 and says why', async () => {
    const r = await cli(['bench', ...TINY.slice(0, -2), '--impl', 'cudnn', ...QUICK]);
    assert.equal(r.code, 1);
    assert.match(
      r.stderr,
      /^attnlab: bench: no row ran \(1 unsupported\); first: attnlab cudnn bf16 1×16×2×16: .*no CUDA here/m,
    );
  });

  it('a size that cannot fit is said before anything runs', async () => {
    const r = await cli(['bench', '--seq', '1000000', '--batch', '64', '--impl', 'flash', ...QUICK]);
    assert.equal(r.code, 1);
    const lines = r.stderr.trimEnd().split('\n');
    assert.match(
      lines[0],
      /^attnlab: bench: will not run attnlab flash bf16 64×1000000×8×64: needs \d\.\d+ TiB \(Q, K, V, O and two float64 copies of each\), .* of host memory is free$/,
    );
    assert.match(lines[1], /no row ran \(1 out-of-memory\)/);
  });
});

describe('the process ends quietly', () => {
  it('when the reader of stdout has gone (EPIPE)', async () => {
    const runs = await Promise.all([
      cli(['info'], { closeStdout: true }),
      cli(['check', '--device', 'cpu', '--case', 'MQA', '--seed', '1'], { closeStdout: true }),
    ]);
    for (const r of runs) {
      assert.equal(r.code, 0, r.stderr);
      assert.equal(r.stderr, '');
    }
  });
  it('when stdout is a full disk: one line saying so, not "a bug in attnlab"', () => {
    const full = openSync('/dev/full', 'w');
    const r = spawnSync(process.execPath, ['--import', 'tsx', 'src/cli/bin.ts', 'info'], {
      cwd: root,
      env,
      stdio: ['ignore', full, 'pipe'],
      encoding: 'utf8',
      timeout: 30_000,
    });
    closeSync(full);
    assertOneLineFailure(
      { code: r.status, stdout: '', stderr: r.stderr },
      /^attnlab: writing the output failed: no space left on the device \(ENOSPC\)$/,
    );
  });

  it('with the status of the run: a bench in which no row ran still exits 1', async () => {
    // The status is set before the output: ending at the first write after the reader had gone, the
    // process once exited 0 here.
    const r = await cli(['bench', ...TINY.slice(0, -1), 'naive', ...QUICK], { closeStdout: true });
    assert.equal(r.code, 1, r.stderr);
  });

  it('at the first write after the reader has gone, not when a long run ends', async () => {
    // The lab awaits only settled promises between sections, so the 'error' event of the failed
    // write never ran: every section ran on, its progress lines on stderr, to the end.
    const r = await cli(['lab', '--quick', '--no-report'], { closeStdout: true, timeoutMs: 60_000 });
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stderr, '', 'no section ran after stdout closed');
  });
});

describe('info without a GPU', () => {
  it('prints lines within 100 columns and lists only the CPU backends as available', async () => {
    const r = await new Promise<Run>((resolve) => {
      const child = spawn(process.execPath, ['--import', 'tsx', 'src/cli/bin.ts', 'info'], {
        cwd: root,
        // A library path that does not exist gives the longest reason: every place searched.
        env: { ...process.env, ATTNLAB_DISABLE_CUDA: '', ATTNLAB_LIBCUDA: join(work, 'no-libcuda.so.1') },
      });
      let stdout = '';
      child.stdout.on('data', (d) => (stdout += d));
      child.on('close', (code) => resolve({ code, stdout, stderr: '' }));
    });
    assert.equal(r.code, 0);
    for (const line of r.stdout.trimEnd().split('\n'))
      assert.ok([...line].length <= 100, `too wide: ${line}`);
    const backends = r.stdout.split('\n').find((l) => /│ backends /.test(l)) ?? '';
    assert.match(backends, /reference/);
    assert.doesNotMatch(backends, /cuda|cudnn|naive/);
    assert.match(r.stdout, /not available +│ cudnn, flash, naive \(cuda\): they need a CUDA GPU/);
  });
});

describe('report neutralises terminal control sequences from a results file', () => {
  it('prints ESC, OSC, CSI, C1 and CR as visible text, and keeps newlines', async () => {
    const results = await tinyResults(join(work, 'tiny.json'));
    results.rows[0].label = 'evil \u001b]52;c;aGVsbG8=\u0007 \u001b[2J \u009b31m \r over';
    results.notes.push('a note \u001b[31mred\u001b[0m');
    results.machine.cpu = 'cpu \u001bP tmux; \u001b\\';
    const hostile = join(work, 'hostile.json');
    writeFileSync(hostile, JSON.stringify(results));
    const r = await cli(['report', hostile, '-o', join(work, 'hostile.html')]);
    assert.equal(r.code, 0, r.stderr);
    // biome-ignore lint/suspicious/noControlCharactersInRegex: finding control characters is the point
    assert.doesNotMatch(r.stdout, /[\u0000-\u0008\u000b-\u001f\u007f-\u009f]/);
    for (const shown of [/evil \\x1b\]52;c;aGVsbG8=\\x07/, /\\x1b\[2J/, /\\x9b31m/, /\\x0d over/]) {
      assert.match(r.stdout, shown);
    }
    assert.match(r.stdout, /a note \\x1b\[31mred\\x1b\[0m/);
  });
});

describe('report reads only regular JSON files, and says so in one inert line', () => {
  const folder = join(work, 'report-inputs');
  mkdirSync(folder);

  it('text that is not JSON: the parser quotes its bytes, written out as \\xNN', async () => {
    const escapes = join(folder, 'escapes.json');
    writeFileSync(escapes, '\u001b[2J\u001b]52;c;aGVsbG8=\u0007\nsecond line');
    const elf = join(folder, 'elf.json');
    writeFileSync(elf, Buffer.from([0x7f, 0x45, 0x4c, 0x46, 2, 1, 1, 0, 0, 0, 0x0a, 0x0d]));
    const [a, b] = await Promise.all([
      cli(['report', escapes, '-o', join(work, 'r1.html')]),
      cli(['report', elf, '-o', join(work, 'r2.html')]),
    ]);
    assertOneLineFailure(a, /escapes\.json: expected JSON, got unparsable text \(.*\\x1b\[2J\\x1b\]52/);
    assertOneLineFailure(b, /elf\.json: expected JSON, got unparsable text \(.*\\x7fELF\\x02/);
    // biome-ignore lint/suspicious/noControlCharactersInRegex: finding control characters is the point
    for (const r of [a, b]) assert.doesNotMatch(r.stderr.trimEnd(), /[\u0000-\u001f\u007f-\u009f]/);
  });

  it('a field the schema refuses: the value it quotes is inert too (C1 controls and DEL included)', async () => {
    const json = join(folder, 'c1.json');
    const results = await tinyResults(json);
    // JSON.stringify, which quotes the value, escapes ESC but not the one-byte CSI U+009B or DEL.
    results.rows[0].dtype = '\u009b2J\u001b[31m\u007f';
    writeFileSync(json, JSON.stringify(results));
    const r = await cli(['report', json, '-o', join(work, 'r5.html')]);
    assertOneLineFailure(r, /\$\.rows\[0\]\.dtype: expected one of .*, got "\\x9b2J\\u001b\[31m\\x7f"/);
    // biome-ignore lint/suspicious/noControlCharactersInRegex: finding control characters is the point
    assert.doesNotMatch(r.stderr.trimEnd(), /[\u0000-\u001f\u007f-\u009f]/);
  });

  it('a FIFO with no writer and a folder are refused before reading (no hang)', async () => {
    const fifo = join(folder, 'fifo.json');
    spawnSync('mkfifo', [fifo]);
    const [pipe, dir] = await Promise.all([
      cli(['report', fifo, '-o', join(work, 'r3.html')], { timeoutMs: 20_000 }),
      cli(['report', folder, '-o', join(work, 'r4.html')]),
    ]);
    assertOneLineFailure(
      pipe,
      /results file: expected a readable JSON file, got .*fifo\.json \(a FIFO \(named pipe\), not a regular file\)/,
    );
    assertOneLineFailure(dir, /got .*report-inputs \(a folder, not a regular file\)/);
  });

  it('a file name holding a newline is one line in the table heading', async () => {
    const named = join(folder, 'two\nlines.json');
    const bench = await cli(['bench', ...TINY, ...QUICK, '--json', named]);
    assert.equal(bench.code, 0, bench.stderr);
    const r = await cli(['report', named, '-o', join(work, 'r5.html')]);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /^two\\x0alines: 1 rows$/m);
    assert.doesNotMatch(r.stdout, /^lines/m);
  });
});

describe('Ctrl-C during bench', () => {
  it('stops after the case being measured, saves the rows that finished with a note, and exits 130', async () => {
    const json = join(work, 'interrupted.json');
    const sweep = '--seq 16..4096 --heads 2 --head-dim 16 --batch 1 --impl reference,flash';
    const timing = '--budget-ms 20 --repeats 3 --warmup 0 --settle-ms 0';
    const args = ['bench', ...`${sweep} ${timing}`.split(' '), '--json', json];
    const r = await new Promise<Run & { signal: NodeJS.Signals | null }>((resolve, reject) => {
      const child = spawn(process.execPath, ['--import', 'tsx', 'src/cli/bin.ts', ...args], {
        cwd: root,
        env,
      });
      let [stdout, stderr, sent] = ['', '', false];
      child.stdout.on('data', (d) => (stdout += d));
      // Progress lines ([i/18] …) go to stderr off a TTY: interrupt once the third case has started.
      child.stderr.on('data', (d) => {
        stderr += d;
        if (!sent && /^\[3\/18\]/m.test(stderr)) {
          sent = true;
          child.kill('SIGINT');
        }
      });
      const timer = setTimeout(() => {
        child.kill('SIGKILL');
        reject(new Error(`bench did not end within 60 s; stderr: ${stderr}`));
      }, 60_000);
      child.on('close', (code, signal) => {
        clearTimeout(timer);
        resolve({ code, signal, stdout, stderr });
      });
    });
    assert.equal(r.code, 130, `ended by ${r.signal}; stderr: ${r.stderr}`);
    const saved = JSON.parse(readFileSync(json, 'utf8')) as { rows: unknown[]; notes: string[] };
    assert.ok(saved.rows.length >= 3 && saved.rows.length < 18, `${saved.rows.length} rows`);
    assert.ok(
      saved.notes.some((n) => n.startsWith(`interrupted: ${saved.rows.length} of 18 attnlab cases measured`)),
      saved.notes.join(' | '),
    );
    assert.match(r.stderr, new RegExp(`interrupted: ${saved.rows.length} rows finished, saved to `));
    assert.match(r.stdout, /note: interrupted: /);
    assert.doesNotMatch(r.stderr, /\n\s+at /, 'no stack trace');
  });
});
