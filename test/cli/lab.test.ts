/** `attnlab lab`, `bench` and `report` as a user runs them on a machine without a GPU. */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { loadResults } from '../../src/results/files.js';

const root = fileURLToPath(new URL('../..', import.meta.url));
const out = mkdtempSync(join(tmpdir(), 'attnlab-lab-'));
const env = { ATTNLAB_DISABLE_CUDA: '1', NO_COLOR: '1' };

function runCli(args: string[], extra: Record<string, string> = {}) {
  const result = spawnSync(process.execPath, ['--import', 'tsx', 'src/cli/bin.ts', ...args], {
    cwd: root,
    encoding: 'utf8',
    env: { ...process.env, ...env, ...extra },
    timeout: 240_000,
  });
  return { code: result.status, stdout: result.stdout, stderr: result.stderr };
}

const SECTIONS = [
  '2. GPU check',
  '3. Create the test arrays Q, K and V',
  '4. Attention from scratch',
  '5. Switch to the fused dotProductAttention',
  '6. Force the cuDNN fused backend',
  '7. Add causal masking',
  '8a. Time the variants at the default shape',
  '8b. Sweep the sequence length',
  '8c. Sweep the batch size',
  '9. Compare MHA, GQA and MQA',
  '10a. The TransformerEngine-style module over sequence lengths',
  '10b. Inspect the FP8 path',
];

describe('attnlab lab on the CPU', () => {
  const lab = runCli(['lab', '--quick', '--budget-ms', '20', '--out', out]);

  it('runs every section in order and says it is on the CPU', () => {
    assert.equal(lab.code, 0, lab.stderr);
    let at = -1;
    for (const section of SECTIONS) {
      const found = lab.stdout.indexOf(section);
      assert.ok(found > at, `section "${section}" missing or out of order`);
      at = found;
    }
    assert.match(lab.stdout, /No CUDA GPU here: the lab runs attnlab's CPU backends/);
    assert.match(lab.stdout, /cuDNN fused attention — not available here/);
    assert.match(lab.stdout, /Outputs close \(atol=1e-3\)\s+│ true/);
    assert.match(lab.stdout, /FP8 support │ No detected support; requires Hopper\/Blackwell-class GPU/);
    const widest = Math.max(
      ...lab.stdout
        .split('\n')
        .filter((l) => /^[│┌└├]/.test(l))
        .map((l) => [...l].length),
    );
    assert.ok(widest <= 100, `a table line is ${widest} columns wide`);
  });

  it('writes a valid results file and a report with the sweeps', () => {
    const results = loadResults(join(out, 'lab.json'));
    assert.equal(results.kind, 'lab');
    assert.equal(results.machine.device, 'cpu');
    const sweeps = new Set(results.rows.filter((r) => r.status === 'ok').map((r) => r.sweep));
    for (const sweep of ['default', 'seq', 'batch', 'heads'])
      assert.ok(sweeps.has(sweep), `no timed rows for ${sweep}`);
    const titles = results.tables.map((t) => t.title);
    assert.ok(titles.some((t) => t.startsWith('Causal masking effect on the attention output')));
    const causal = results.tables.find((t) => t.title.startsWith('Causal'))!;
    assert.ok(Number(causal.rows[0][1]) > 0.1, 'the first position must change under the causal mask');
    assert.ok(Number(causal.rows[1][1]) < 1e-6, 'the last position must not');
    const html = readFileSync(join(out, 'lab.html'), 'utf8');
    assert.match(html, /<canvas id="chart-\d+-seq-ms"/);
  });
});

describe('attnlab bench and report on the CPU', () => {
  it('bench sweeps, goes on without missing peers, and report compares two files', () => {
    const bench = runCli(
      [
        'bench',
        '--seq',
        '16..64',
        '--heads',
        '2',
        '--head-dim',
        '16',
        '--batch',
        '1',
        '--dtype',
        'f32',
        '--budget-ms',
        '5',
        '--repeats',
        '5',
        '--peers',
        'jax,torch',
        '--out',
        out,
        '--name',
        'unit',
      ],
      { ATTNLAB_PYTHON: '/nonexistent/python' },
    );
    assert.equal(bench.code, 0, bench.stderr);
    assert.match(
      bench.stderr,
      /\[1\/\d+\] unit: attnlab reference float32 1×16×2×16/,
      'progress lines in a log',
    );
    assert.match(bench.stdout, /peer jax not run: no Python with jax/);
    const results = loadResults(join(out, 'unit.json'));
    assert.deepEqual(
      results.rows.map((r) => `${r.impl} T=${r.T}`),
      ['reference T=16', 'flash T=16', 'reference T=32', 'flash T=32', 'reference T=64', 'flash T=64'],
    );
    assert.ok(existsSync(join(out, 'unit.html')));

    const html = join(out, 'compare.html');
    const report = runCli(['report', join(out, 'unit.json'), join(out, 'lab.json'), '-o', html]);
    assert.equal(report.code, 0, report.stderr);
    assert.match(report.stdout, /report: .*compare\.html/);
    assert.match(readFileSync(html, 'utf8'), /unit: attnlab flash f32/);
  });

  it('--preset codelab runs the default, sequence and batch sweeps into <name>.json', () => {
    const r = runCli([
      'bench',
      '--preset',
      'codelab',
      '--name',
      'preset-run',
      '--budget-ms',
      '2',
      '--repeats',
      '3',
      '--warmup',
      '0',
      '--no-check',
      '--no-progress',
      '--out',
      out,
    ]);
    assert.equal(r.code, 0, r.stderr);
    const results = loadResults(join(out, 'preset-run.json'));
    assert.deepEqual([...new Set(results.rows.map((row) => row.sweep))], ['default', 'seq', 'batch']);
    assert.ok(results.rows.every((row) => row.status === 'ok' && row.errorCheck === 'none'));
  });

  it('a bad option names itself', () => {
    const r = runCli(['bench', '--seq', '64..32']);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /--seq: expected a range a\.\.b with 1 ≤ a ≤ b/);
    const missing = runCli(['report', join(out, 'nope.json')]);
    assert.equal(missing.code, 1);
    assert.match(missing.stderr, /nope\.json/);
  });
});
