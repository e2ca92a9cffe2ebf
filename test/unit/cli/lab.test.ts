/** `attnlab lab`, `bench` and `report` as a user runs them on a machine without a GPU. */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { formatBytes } from '../../../src/errors.js';
import { loadResults } from '../../../src/results/files.js';

const root = fileURLToPath(new URL('../../..', import.meta.url));
const out = mkdtempSync(join(tmpdir(), 'attnlab-lab-'));
const env = { ATTNLAB_DISABLE_CUDA: '1', NO_COLOR: '1' };
// Absolute, so that the CLI can run in a folder of its own (where the lab writes by default).
const tsx = import.meta.resolve('tsx');
const bin = join(root, 'src/cli/bin.ts');

function runCli(args: string[], extra: Record<string, string> = {}, cwd = root) {
  const result = spawnSync(process.execPath, ['--import', tsx, bin, ...args], {
    cwd,
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
  '9a. Compare MHA, GQA and MQA',
  '9b. Decoding: what GQA and MQA save in the KV cache',
  '10a. The TransformerEngine-style module over sequence lengths',
  '10b. Inspect the FP8 path',
  '11. Beyond the codelab: forward and backward per backend',
];

// No --out: the lab writes its results and report to a folder of its own and names it last.
const cwd = mkdtempSync(join(tmpdir(), 'attnlab-lab-cwd-'));
const lab = runCli(['lab', '--quick', '--budget-ms', '20'], {}, cwd);
const written = /^results: (attnlab-out\/lab-\d{8}-\d{6}\/lab\.json)\nreport: +(\S+lab\.html) /m.exec(
  lab.stdout,
);

describe('attnlab lab on the CPU', () => {
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

  it('draws the sweeps as line charts, with the sizes under the x axis and a legend', () => {
    const seq = lab.stdout.slice(lab.stdout.indexOf('8b. Sweep the sequence length'));
    const chart = seq.slice(seq.indexOf('Sequence length sweep: median time per call vs query length T'));
    assert.match(chart, /^ +└┬─+┬/m, 'an x axis with ticks');
    assert.match(chart, /^ +16 +32 +64 +128$/m, 'the sequence lengths under it');
    assert.match(chart, /^ {2}─── attnlab reference f32\n {2}━━━ attnlab flash f32$/m);
    assert.doesNotMatch(lab.stdout, /^ {2}a = /m, 'no pivot tables of letters');
  });

  it('names the folder it wrote on its last lines, under the current folder', () => {
    assert.ok(written, `no results/report lines at the end:\n${lab.stdout.slice(-400)}`);
    assert.ok(lab.stdout.trimEnd().endsWith('(open it in a browser: every sweep as a chart)'));
    assert.ok(existsSync(join(cwd, written[1])));
    assert.ok(existsSync(join(cwd, written[2])));
    assert.deepEqual(readdirSync(join(cwd, 'attnlab-out')).length, 1);
  });

  it('--help gives the sizes this machine runs, the ones the lab then ran', () => {
    const help = runCli(['lab', '--help']);
    assert.equal(help.code, 0, help.stderr);
    assert.match(help.stdout, /no CUDA GPU: ATTNLAB_DISABLE_CUDA=1\) the lab runs the CPU backends/);
    const seq = /8b +sequence sweep T = (\d+), .* \(to (\d+) with --quick\), B=(\d+)/.exec(help.stdout);
    const batch = /8c +batch sweep B = (\d+), .* \(to (\d+) with --quick\) at T=(\d+)/.exec(help.stdout);
    assert.ok(seq && batch, help.stdout);
    assert.ok(written);
    const rows = loadResults(join(cwd, written[1])).rows;
    const values = (sweep: string, key: 'T' | 'B') =>
      rows.filter((r) => r.sweep === sweep).map((r) => r[key]);
    // The lab above ran with --quick: the help's first values and --quick ends are what it ran.
    assert.equal(Math.min(...values('seq', 'T')), Number(seq[1]));
    assert.equal(Math.max(...values('seq', 'T')), Number(seq[2]));
    assert.deepEqual(new Set(values('seq', 'B')), new Set([Number(seq[3])]));
    assert.equal(Math.min(...values('batch', 'B')), Number(batch[1]));
    assert.equal(Math.max(...values('batch', 'B')), Number(batch[2]));
    assert.deepEqual(new Set(values('batch', 'T')), new Set([Number(batch[3])]));
    // Every heading's number is in the help, alone ('8a') or in a range ('3-7').
    const labels = [...help.stdout.matchAll(/^ {2}(\d+[a-c]?)(?:-(\d+))? /gm)];
    for (const section of SECTIONS) {
      const number = section.split('.')[0];
      const covered = labels.some(([, first, last]) =>
        last ? Number(number) >= Number(first) && Number(number) <= Number(last) : first === number,
      );
      assert.ok(covered, `section ${number} is not in lab --help`);
    }
  });

  it('--no-report writes nothing', () => {
    const quiet = mkdtempSync(join(tmpdir(), 'attnlab-lab-quiet-'));
    const r = runCli(['lab', '--quick', '--budget-ms', '1', '--no-report'], {}, quiet);
    assert.equal(r.code, 0, r.stderr);
    assert.deepEqual(readdirSync(quiet), []);
    assert.doesNotMatch(r.stdout, /^results: /m);
  });

  it('writes a valid results file and a report with the sweeps', () => {
    assert.ok(written);
    const results = loadResults(join(cwd, written[1]));
    assert.equal(results.kind, 'lab');
    assert.equal(results.machine.device, 'cpu');
    const sweeps = new Set(results.rows.filter((r) => r.status === 'ok').map((r) => r.sweep));
    for (const sweep of ['default', 'seq', 'batch', 'heads'])
      assert.ok(sweeps.has(sweep), `no timed rows for ${sweep}`);
    // 8a times the webgpu backend beside the others where an adapter exists, else says why not.
    const webgpu = results.rows.find((r) => r.sweep === 'default' && r.impl === 'webgpu');
    assert.ok(webgpu, 'no webgpu row in 8a');
    if (webgpu.status !== 'ok')
      assert.match(webgpu.reason ?? '', /webgpu cannot run this case: not available: /);
    const titles = results.tables.map((t) => t.title);
    assert.ok(titles.some((t) => t.startsWith('Causal masking effect on the attention output')));
    const causal = results.tables.find((t) => t.title.startsWith('Causal'))!;
    assert.ok(Number(causal.rows[0][1]) > 0.1, 'the first position must change under the causal mask');
    assert.ok(Number(causal.rows[1][1]) < 1e-6, 'the last position must not');
    const html = readFileSync(join(cwd, written[2]), 'utf8');
    assert.match(html, /<canvas id="chart-\d+-seq-ms-s\d+"/);
    // Plain section titles, each chart with what it shows; no internal sweep id as a title.
    assert.match(html, /<h2>8b\. Sweep the sequence length<\/h2>/);
    assert.match(html, /What this shows:<\/strong> Attention does/);
    assert.doesNotMatch(html, /<h3>(seq|batch|fwd-bwd T=\d+):/);
    assert.match(html, /Why fused is not faster here/);
  });
});

describe('attnlab lab beyond the codelab: decoding (9b) and the backward (11)', () => {
  const results = () => {
    assert.ok(written, 'the lab wrote no results');
    return loadResults(join(cwd, written[1]));
  };

  it('9b times one decode step for K = 8, 2, 1 at fixed N and tabulates the cache bytes', () => {
    const { rows, tables } = results();
    const decode = rows.filter((r) => r.sweep === 'decode');
    assert.deepEqual(
      decode.map((r) => r.K),
      [8, 2, 1],
    );
    const [first] = decode;
    for (const r of decode) {
      assert.equal(r.status, 'ok', r.reason);
      assert.equal(r.T, 1, 'one query token per sequence');
      assert.ok(r.S >= 1024, `a long cache, got S=${r.S}`);
      assert.deepEqual([r.B, r.S, r.N, r.H], [first.B, first.S, first.N, first.H], 'only K varies');
      assert.ok(r.timing && r.timing.ms.median > 0);
      assert.ok(r.maxError !== null && r.maxError !== undefined && r.maxError < 1e-4, `error ${r.maxError}`);
    }
    const table = tables.find((t) => t.title === 'KV-cache bytes and decode-step time');
    assert.ok(table, 'no cache-bytes table');
    assert.equal(table.rows.length, 3);
    const column = (name: string) => table.headers.indexOf(name);
    for (const [i, r] of decode.entries()) {
      // float32 on the CPU: 2 (K and V) · B · S · K · H · 4 bytes.
      assert.equal(table.rows[i][column('Cache bytes')], formatBytes(2 * r.B * r.S * r.K * r.H * 4));
      assert.equal(table.rows[i][column('K=8 bytes / these')], `${8 / r.K}×`);
      assert.equal(Number(table.rows[i][column('ms per step')]), Number(r.timing!.ms.median.toFixed(4)));
      assert.ok(Number(table.rows[i][column('GB/s read')]) > 0);
      // The row carries the same bandwidth (results schema): cache read once, Q and O, over the median.
      const bytes = 2 * r.B * r.S * r.K * r.H * 4 + 2 * r.B * r.N * r.H * 4;
      assert.ok(
        Math.abs(r.bandwidthGBs! - bytes / (r.timing!.ms.median * 1e-3) / 1e9) < 1e-6 * r.bandwidthGBs!,
      );
    }
    assert.match(lab.stdout, /One decode step by KV heads: median time per call vs KV heads K/);
    assert.match(lab.stdout, /K=1 keeps [\d.]+ \w+ of cache where K=8 keeps [\d.]+ \w+ \(8× fewer bytes/);
  });

  it('11 times forward and backward of every CPU backend at the default shape and a long one', () => {
    const { rows } = results();
    const passRows = rows.filter((r) => r.sweep.startsWith('fwd-bwd'));
    const shapes = [...new Set(passRows.map((r) => r.T))];
    assert.equal(shapes.length, 2, `two shapes, got T = ${shapes.join(', ')}`);
    assert.ok(shapes[1] > shapes[0], 'the second shape is the longer sequence');
    for (const T of shapes) {
      for (const impl of ['reference', 'flash']) {
        const forward = passRows.find(
          (r) => r.T === T && r.impl === impl && (r.pass ?? 'forward') === 'forward',
        );
        const backward = passRows.find((r) => r.T === T && r.impl === impl && r.pass === 'backward');
        assert.ok(forward && backward, `${impl} at T=${T}: both passes`);
        assert.equal(forward.status, 'ok', forward.reason);
        assert.equal(backward.status, 'ok', backward.reason);
        assert.equal(backward.flops, 2.5 * forward.flops, 'the backward counts 2.5× the forward flops');
        assert.ok(backward.timing!.ms.median > 0 && forward.timing!.ms.median > 0);
        assert.match(backward.label, /backward$/);
      }
    }
    const html = readFileSync(join(cwd, written![2]), 'utf8');
    assert.match(html, /<canvas id="chart-\d+-fwd-bwd-t-\d+-ms-s\d+"/);
    assert.match(html, /<canvas id="chart-\d+-decode-ms-s\d+"/);
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
    const report = runCli([
      'report',
      join(out, 'unit.json'),
      join(cwd, written?.[1] ?? 'lab.json'),
      '-o',
      html,
    ]);
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

describe('attnlab lab --notebook', () => {
  it('writes the codelab notebook and runs nothing, never over an existing one, and takes no lab options', () => {
    const dir = join(mkdtempSync(join(tmpdir(), 'attnlab-notebook-')), 'nb');
    const r = runCli(['lab', '--notebook', dir]);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /notebook: .*attention-codelab\.ipynb/);
    assert.match(r.stdout, /npx tslab install/);
    assert.doesNotMatch(r.stdout, /GPU check/);
    const written = readFileSync(join(dir, 'attention-codelab.ipynb'), 'utf8');
    assert.equal(written, readFileSync(join(root, 'notebooks/attention-codelab.ipynb'), 'utf8'));
    const again = runCli(['lab', '--notebook', dir]);
    assert.equal(again.code, 1);
    assert.match(again.stderr, /--notebook: expected a folder without attention-codelab\.ipynb/);
    const quick = runCli(['lab', '--notebook', dir, '--quick']);
    assert.equal(quick.code, 1);
    assert.match(quick.stderr, /--notebook: expected no --quick with --notebook/);
    // Without a folder: the current one.
    const here = mkdtempSync(join(tmpdir(), 'attnlab-notebook-here-'));
    assert.equal(runCli(['lab', '--notebook'], {}, here).code, 0);
    assert.ok(existsSync(join(here, 'attention-codelab.ipynb')));
  });
});
