/**
 * Stop signals are heard wherever the run is: in the lab's last section, and during one long CPU case of
 * bench (run in a worker thread, so the event loop is free). Each CLI run is a child process with a limit.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { loadResults } from '../../../src/results/files.js';

const root = fileURLToPath(new URL('../../..', import.meta.url));
const work = mkdtempSync(join(tmpdir(), 'attnlab-signals-'));
const env = { ...process.env, ATTNLAB_DISABLE_CUDA: '1', NO_COLOR: '1' };

interface Child {
  /** Resolves when the output so far matches `pattern` (rejects past `ms`). */
  readonly until: (pattern: RegExp, ms: number) => Promise<void>;
  readonly kill: (signal: NodeJS.Signals) => void;
  /** The exit code (or the signal that ended it) and the time it ended. */
  readonly done: Promise<{ code: number | null; at: number }>;
  readonly output: () => string;
}

function attnlab(args: string[], limitMs: number): Child {
  const child = spawn(process.execPath, ['--import', 'tsx', 'src/cli/bin.ts', ...args], { cwd: root, env });
  let output = '';
  child.stdout.on('data', (d) => {
    output += d;
  });
  child.stderr.on('data', (d) => {
    output += d;
  });
  const timer = setTimeout(() => child.kill('SIGKILL'), limitMs);
  const done = new Promise<{ code: number | null; at: number }>((resolve) =>
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, at: Date.now() });
    }),
  );
  return {
    until: async (pattern, ms) => {
      const t0 = Date.now();
      while (!pattern.test(output)) {
        if (Date.now() - t0 > ms) throw new Error(`no ${pattern} within ${ms} ms; output: ${output}`);
        await new Promise((r) => setTimeout(r, 50));
      }
    },
    kill: (signal) => child.kill(signal),
    done,
    output: () => output,
  };
}

describe('lab: a stop signal during the last section', () => {
  for (const [signal, code] of [
    ['SIGTERM', 143],
    ['SIGHUP', 129],
  ] as const) {
    it(`${signal} in section 11 marks lab.json interrupted and exits ${code}`, async () => {
      const out = join(work, `lab-${signal}`);
      const lab = attnlab(['lab', '--quick', '--budget-ms', '5', '--out', out], 240_000);
      await lab.until(/11\. Beyond the codelab/, 200_000);
      lab.kill(signal);
      const { code: exit } = await lab.done;
      assert.equal(exit, code, lab.output().slice(-2000));
      const notes = loadResults(join(out, 'lab.json')).notes;
      assert.match(
        notes.at(-1) ?? '',
        new RegExp(`^interrupted: sections up to \\S+ of 11 finished, .*\\(stopped by ${signal}\\)$`),
      );
      assert.ok(!notes.some((n) => n.startsWith('partial: ')), 'the partial mark is replaced');
    });
  }
});

describe('bench: a stop signal during one long CPU case', () => {
  const LONG = [
    '--impl',
    'reference',
    '--heads',
    '8',
    '--head-dim',
    '64',
    '--batch',
    '1',
    '--warmup',
    '0',
    '--no-check',
    '--settle-ms',
    '0',
  ];

  it('the first signal is heard at once, a second quits at once (the case alone would run for a minute)', async () => {
    const bench = attnlab(['bench', ...LONG, '--seq', '1024', '--repeats', '3'], 120_000);
    await bench.until(/\[1\/1\] bench: attnlab reference/, 60_000);
    // Into the case: past the worker's start.
    await new Promise((r) => setTimeout(r, 3000));
    bench.kill('SIGTERM');
    await bench.until(/SIGTERM: stopping after the current case/, 3000);
    const second = Date.now();
    bench.kill('SIGTERM');
    const { code, at } = await bench.done;
    assert.equal(code, 143, bench.output());
    assert.ok(at - second < 3000, `quit ${at - second} ms after the second signal`);
  });

  it('the first signal alone stops after the case: its row saved, marked interrupted, exit 143', async () => {
    const json = join(work, 'long-case.json');
    const bench = attnlab(['bench', ...LONG, '--seq', '512', '--repeats', '1', '--json', json], 120_000);
    await bench.until(/\[1\/1\] bench: attnlab reference/, 60_000);
    await new Promise((r) => setTimeout(r, 1500));
    bench.kill('SIGTERM');
    await bench.until(/SIGTERM: stopping after the current case/, 3000);
    const { code } = await bench.done;
    assert.equal(code, 143, bench.output());
    const saved = loadResults(json);
    assert.equal(saved.rows.length, 1);
    assert.equal(saved.rows[0].status, 'ok');
    assert.ok(
      saved.notes.some((n) => /^interrupted: .*\(stopped by SIGTERM\)$/.test(n)),
      saved.notes.join(' | '),
    );
  });
});
