/** The CLI as a user runs it: a child process, its output and its exit code. */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { DTYPE_ALIASES } from '../../../src/bench/sweep.js';
import { FLOAT_DTYPES } from '../../../src/tensor/dtype.js';

const root = fileURLToPath(new URL('../../..', import.meta.url));

export function runCli(args: string[], env: Record<string, string> = {}) {
  const result = spawnSync(process.execPath, ['--import', 'tsx', 'src/cli/bin.ts', ...args], {
    cwd: root,
    encoding: 'utf8',
    env: { ...process.env, ...env },
    timeout: 120_000,
  });
  return { code: result.status, stdout: result.stdout, stderr: result.stderr };
}

describe('attnlab CLI', () => {
  it('--help lists the commands', () => {
    const r = runCli(['--help']);
    assert.equal(r.code, 0, r.stderr);
    for (const command of ['info', 'check', 'tune']) assert.match(r.stdout, new RegExp(`\\b${command}\\b`));
  });

  it('info --json reports the versions and why CUDA is unavailable when it is', () => {
    const r = runCli(['info', '--json'], { ATTNLAB_DISABLE_CUDA: '1' });
    assert.equal(r.code, 0, r.stderr);
    const info = JSON.parse(r.stdout);
    assert.equal(info.node, process.version);
    assert.match(info.cuda, /not available: ATTNLAB_DISABLE_CUDA=1/);
    assert.match(info.backends, /reference \(cpu\)/);
    assert.match(
      info['auto dispatch'],
      /^model: registry order \(cudnn, flash, naive\): no recorded benchmark/,
    );
    assert.match(
      info['auto backward'],
      /^model: registry order \(cudnn, flash, naive\): .*: no recorded backward for this machine \(no GPU\) \(recorded: NVIDIA H100 80GB HBM3, NVIDIA H200\)$/,
    );
  });

  it('tune needs a GPU and says so; a bad --budget-ms is named before anything runs', () => {
    const r = runCli(['tune', '--quick'], { ATTNLAB_DISABLE_CUDA: '1' });
    assert.equal(r.code, 1);
    assert.match(r.stderr, /attnlab tune .*it times backends on a CUDA GPU: ATTNLAB_DISABLE_CUDA=1/);
    const bad = runCli(['tune', '--budget-ms', '0'], { ATTNLAB_DISABLE_CUDA: '1' });
    assert.equal(bad.code, 1);
    assert.match(bad.stderr, /--budget-ms: expected an integer in \[1, 3600000\] \(ms\), got "0"/);
  });

  it('check runs the CPU matrix and prints a passing table', () => {
    const r = runCli(['check', '--device', 'cpu', '--case', 'MQA', '--seed', '3'], {
      ATTNLAB_DISABLE_CUDA: '1',
    });
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /MQA N=8 K=1/);
    assert.match(r.stdout, /seed 3: 1 passed, 0 failed/);
  });

  it('bad usage names the argument and exits non-zero without a stack trace', () => {
    const r = runCli(['check', '--dtype', 'float128']);
    assert.equal(r.code, 1);
    assert.match(
      r.stderr,
      /--dtype: expected a comma-separated list of float64, float32, tf32, float16, bfloat16 \(or bf16, .*\), got "float128"/,
    );
    assert.doesNotMatch(r.stderr, /at .*\.ts:\d+/);
    assert.equal(runCli(['frobnicate']).code, 2);
  });

  it('bench --help names every dtype --dtype takes (it listed three of six)', () => {
    const help = runCli(['bench', '--help']).stdout.replace(/\s+/g, ' ');
    for (const name of [...FLOAT_DTYPES, ...Object.keys(DTYPE_ALIASES)]) {
      assert.match(help, new RegExp(`--dtype <list> .*\\b${name}\\b.* --causal`), name);
    }
  });

  it('help <command> shows that command, and says so when there is no such command', () => {
    const bench = runCli(['help', 'bench']);
    assert.equal(bench.code, 0, bench.stderr);
    assert.match(bench.stdout, /^Usage: attnlab bench /);
    const unknown = runCli(['help', 'foo']);
    assert.equal(unknown.code, 2);
    assert.match(unknown.stderr, /^error: unknown command 'foo'$/m);
  });
});
