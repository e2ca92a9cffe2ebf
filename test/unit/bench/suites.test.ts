/** Suites as data: what each resolves to, the overrides, where its results are filed, and a CPU run. */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import type { SweepGroup } from '../../../src/bench/run-bench.js';
import { summarize } from '../../../src/bench/stats.js';
import { findSuite, resolveSuite, SUITES, suiteListing } from '../../../src/bench/suites.js';
import { type BenchCase, expandSweep } from '../../../src/bench/sweep.js';
import { chartsFor } from '../../../src/report/charts.js';
import { loadResults } from '../../../src/results/files.js';
import type { ResultRow } from '../../../src/results/schema.js';
import { gpuSlug, suiteResultsFiles, utcDay } from '../../../src/results/suite-path.js';

const root = fileURLToPath(new URL('../../..', import.meta.url));

function cases(groups: readonly SweepGroup[]): (BenchCase & { sweep: string; module?: string })[] {
  return groups.flatMap((g) =>
    expandSweep(g.spec).cases.map((c) => ({
      ...c,
      sweep: g.name,
      ...(g.module ? { module: g.module } : {}),
    })),
  );
}

function suite(name: string) {
  const found = findSuite(name);
  assert.ok(found, `suite ${name}`);
  return found;
}

describe('benchmark suites', () => {
  it('list every suite the CLI names, each once', () => {
    const names = SUITES.map((s) => s.name);
    assert.deepEqual(names, ['forward', 'backward', 'decode', 'fp8', 'codelab']);
    for (const name of names) assert.match(suiteListing(), new RegExp(`^${name} `, 'm'));
  });

  it('forward: the head-dim table and the T sweep at B·T = 32k, causal and not, flash and cudnn', () => {
    const all = cases(resolveSuite(suite('forward'), { device: 'cuda' }));
    const table = all.filter((c) => c.sweep === 'head dims');
    assert.deepEqual([...new Set(table.map((c) => c.H))], [64, 128, 192, 256]);
    for (const c of table)
      assert.deepEqual([c.B, c.T, c.S, c.N, c.K, c.dtype], [4, 8192, 8192, 16, 16, 'bfloat16']);
    assert.equal(table.length, 4 * 2 * 2);
    const sweep = all.filter((c) => c.sweep === 'T sweep at constant B·T');
    assert.deepEqual([...new Set(sweep.map((c) => c.T))], [1024, 2048, 4096, 8192, 16384, 32768]);
    for (const c of sweep) assert.equal(c.B * c.T, 32768, `B=${c.B} T=${c.T}`);
    for (const c of sweep) assert.deepEqual([c.N, c.H, c.S], [16, 128, c.T]);
    assert.equal(sweep.length, 6 * 2 * 2);
    for (const c of all) assert.ok(['flash', 'cudnn'].includes(c.impl));
    assert.deepEqual([...new Set(all.map((c) => c.causal))], [false, true]);
    assert.equal(suite('forward').pass, 'forward');
    // The quick list is the head-dim table alone.
    assert.deepEqual(cases(resolveSuite(suite('forward'), { device: 'cuda', quick: true })), table);
  });

  it('backward times the pass alone at H=64 and 128', () => {
    const s = suite('backward');
    assert.equal(s.pass, 'backward');
    const all = cases(resolveSuite(s, { device: 'cuda' }));
    assert.deepEqual([...new Set(all.map((c) => c.H))], [64, 128]);
    assert.equal(all.length, 2 * 2 * 2);
  });

  it('decode: one query over B·S = 1M cached tokens, K = 8/4/1, dense and paged 16/64', () => {
    const all = cases(resolveSuite(suite('decode'), { device: 'cuda' }));
    for (const c of all) {
      assert.equal(c.T, 1);
      assert.equal(c.B * c.S, 1 << 20, `B=${c.B} S=${c.S}`);
      assert.deepEqual([c.N, c.H, c.dtype], [32, 128, 'bfloat16']);
    }
    assert.deepEqual([...new Set(all.map((c) => c.K))], [8, 4, 1]);
    assert.deepEqual([...new Set(all.map((c) => c.blockSize ?? 0))], [0, 16, 64]);
    // 3 K × 3 shapes × (dense, 16, 64) × (flash, cudnn).
    assert.equal(all.length, 3 * 3 * 3 * 2);
    assert.equal(new Set(all.map((c) => JSON.stringify(c))).size, all.length, 'no case twice');
  });

  it('fp8 times the TE module in bf16 and under FP8 autocast beside bf16 cudnn', () => {
    const all = cases(resolveSuite(suite('fp8'), { device: 'cuda' }));
    assert.deepEqual(
      all.map((c) => `${c.module ?? c.impl} ${c.causal}`),
      ['cudnn false', 'cudnn true', 'te false', 'te true', 'te-fp8 false', 'te-fp8 true'],
    );
    for (const c of all) assert.deepEqual([c.B, c.T, c.N, c.H, c.dtype], [4, 8192, 16, 128, 'bfloat16']);
  });

  it("codelab: the codelab's sweeps on each device", () => {
    const gpu = cases(resolveSuite(suite('codelab'), { device: 'cuda' }));
    assert.ok(gpu.some((c) => c.impl === 'cudnn' && c.T === 1024));
    const cpu = cases(resolveSuite(suite('codelab'), { device: 'cpu' }));
    for (const c of cpu) assert.ok(['reference', 'flash'].includes(c.impl) && c.T <= 128);
  });

  it('overrides replace a dimension in every group, and groups they make alike run once', () => {
    const groups = resolveSuite(suite('forward'), {
      device: 'cpu',
      overrides: { batch: [1], seq: [32], headDim: [16], impl: ['flash'] },
    });
    assert.deepEqual(
      groups.map((g) => g.name),
      ['head dims', 'T sweep at constant B·T'],
    );
    const all = cases(groups);
    assert.equal(all.length, 2 * 2, 'each group: causal and not, flash only');
    for (const c of all) assert.deepEqual([c.B, c.T, c.H, c.N, c.impl], [1, 32, 16, 16, 'flash']);
  });
});

describe('suite charts', () => {
  it('chart the T sweep at constant B·T as one line per implementation over T, not a point per B', () => {
    const rows: ResultRow[] = cases(resolveSuite(suite('forward'), { device: 'cuda' }))
      .filter((c) => c.sweep === 'T sweep at constant B·T' && !c.causal)
      .map((c) => ({
        sweep: c.sweep,
        source: 'attnlab',
        impl: c.impl,
        label: `attnlab ${c.impl} bf16`,
        ...{ B: c.B, T: c.T, S: c.S, N: c.N, K: c.K, H: c.H, dtype: c.dtype, causal: c.causal },
        status: 'ok',
        flops: 4 * c.B * c.N * c.T * c.S * c.H,
        tflops: 500,
        timing: {
          method: 'cuda-events',
          ms: summarize([1, 1, 1]),
          firstCallMs: 1,
          warmup: 1,
          inputCopies: 1,
        },
      }));
    const charts = chartsFor([{ name: 'forward', results: { rows } }]);
    assert.ok(charts.length > 0);
    for (const chart of charts) {
      assert.equal(chart.xLabel, 'query length T');
      assert.deepEqual(
        chart.series.map((s) => [s.label, s.points.length]),
        [
          ['attnlab flash bf16', 6],
          ['attnlab cudnn bf16', 6],
        ],
      );
    }
  });
});

describe('where suite results go', () => {
  it('names the GPU by a short slug', () => {
    const expected: [string | undefined, string][] = [
      ['NVIDIA H200', 'h200'],
      ['NVIDIA H100 80GB HBM3', 'h100-sxm'],
      ['NVIDIA H100 PCIe', 'h100-pcie'],
      ['NVIDIA H100 NVL', 'h100-nvl'],
      ['NVIDIA H800', 'h800'],
      ['NVIDIA A100-SXM4-80GB', 'a100-sxm4'],
      ['NVIDIA GeForce RTX 4090', 'rtx-4090'],
      ['NVIDIA GH200 480GB', 'gh200'],
      ['Tesla T4', 't4'],
      [undefined, 'cpu'],
      ['', 'cpu'],
    ];
    for (const [name, slug] of expected) assert.equal(gpuSlug(name), slug, String(name));
  });

  it('files a run as <root>/<gpu>/<suite>/<date>-<commit>, never over an earlier one', () => {
    const date = new Date('2026-12-06T05:10:00Z');
    assert.equal(utcDay(date), '2026-12-06');
    const first = suiteResultsFiles('benchmarks/results', 'h200', 'forward', date, 'abc1234', () => false);
    assert.deepEqual(first, {
      json: join('benchmarks/results', 'h200', 'forward', '2026-12-06-abc1234.json'),
      html: join('benchmarks/results', 'h200', 'forward', '2026-12-06-abc1234.html'),
    });
    const taken = new Set([first.json]);
    const second = suiteResultsFiles(
      'r',
      'h200',
      'forward',
      date,
      'abc1234',
      (p) => taken.has(join(p)) || p === join('r', 'h200', 'forward', '2026-12-06-abc1234.html'),
    );
    assert.equal(second.json, join('r', 'h200', 'forward', '2026-12-06-abc1234-2.json'));
  });
});

describe('attnlab bench --suite', () => {
  const cli = (args: string[]) =>
    spawnSync(process.execPath, ['--import', 'tsx', 'src/cli/bin.ts', 'bench', ...args], {
      cwd: root,
      encoding: 'utf8',
      env: { ...process.env, ATTNLAB_DISABLE_CUDA: '1', ATTNLAB_COMMIT: 'abc1234' },
      timeout: 120_000,
    });

  it('list prints the suites', () => {
    const r = cli(['--suite', 'list']);
    assert.equal(r.status, 0, r.stderr);
    for (const s of SUITES) assert.match(r.stdout, new RegExp(`^${s.name} `, 'm'));
  });

  it('refuses an unknown suite, a GPU-sized suite on a CPU at its own sizes, and options the suite sets', () => {
    const refused: [string[], RegExp][] = [
      [
        ['--suite', 'prefill'],
        /--suite: expected one of forward, backward, decode, fp8, codelab, or list, got "prefill"/,
      ],
      [
        ['--suite', 'forward'],
        /--suite: expected a GPU for the suite 'forward' at its own sizes \(no CUDA here/,
      ],
      [
        ['--suite', 'backward', '--pass', 'forward', '--seq', '16'],
        /--pass: expected no --pass beside --suite/,
      ],
      [['--suite', 'codelab', '--preset', 'codelab'], /--preset: expected no --preset beside --suite/],
      [['--quick'], /--quick: expected --quick with --suite/],
    ];
    for (const [args, message] of refused) {
      const r = cli(args);
      assert.equal(r.status, 1, `${args.join(' ')}: ${r.stderr}`);
      assert.match(r.stderr, message);
    }
  });

  it('times the TE module in bf16 and under FP8 autocast where the fp8 suite names it (CPU emulation)', () => {
    const out = mkdtempSync(join(tmpdir(), 'attnlab-suite-'));
    try {
      const r = cli([
        '--suite',
        'fp8',
        '--batch',
        '1',
        '--seq',
        '16',
        '--heads',
        '2',
        '--head-dim',
        '16',
        '--impl',
        'reference',
        '--repeats',
        '2',
        '--warmup',
        '0',
        '--budget-ms',
        '1',
        '--settle-ms',
        '0',
        '--out',
        out,
        '--no-progress',
      ]);
      assert.equal(r.status, 0, r.stderr);
      const folder = join(out, 'cpu', 'fp8');
      const [file] = readdirSync(folder).filter((f) => f.endsWith('.json'));
      const rows = loadResults(join(folder, file)).rows;
      assert.deepEqual(
        rows.map((row) => `${row.impl} ${row.causal} ${row.status}`),
        [
          'reference false ok',
          'reference true ok',
          'te false ok',
          'te true ok',
          'te-fp8 false ok',
          'te-fp8 true ok',
        ],
      );
      // FP8 rounds Q, K, V and P to e4m3: its error against float64 is far above bf16's, the bf16 module's is not.
      const error = (impl: string) =>
        Math.max(...rows.filter((row) => row.impl === impl).map((row) => row.maxError ?? Infinity));
      assert.ok(error('te') < 0.01, `te ${error('te')}`);
      assert.ok(error('te-fp8') > 3 * error('te'), `te-fp8 ${error('te-fp8')} against te ${error('te')}`);
    } finally {
      rmSync(out, { recursive: true, force: true });
    }
  });

  it('runs a suite on the CPU backends at tiny sizes and files it by GPU, suite, date and commit', () => {
    const out = mkdtempSync(join(tmpdir(), 'attnlab-suite-'));
    try {
      const r = cli([
        '--suite',
        'backward',
        '--quick',
        '--batch',
        '1',
        '--seq',
        '16',
        '--heads',
        '2',
        '--head-dim',
        '8',
        '--impl',
        'reference,flash',
        '--repeats',
        '2',
        '--warmup',
        '0',
        '--budget-ms',
        '1',
        '--out',
        out,
        '--no-progress',
      ]);
      assert.equal(r.status, 0, r.stderr);
      const folder = join(out, 'cpu', 'backward');
      const stem = `${new Date().toISOString().slice(0, 10)}-abc1234`;
      assert.deepEqual(readdirSync(folder).sort(), [`${stem}.html`, `${stem}.json`]);
      const results = loadResults(join(folder, `${stem}.json`));
      assert.deepEqual(results.suite, {
        name: 'backward',
        gpu: 'cpu',
        quick: true,
        overrides: ['--batch 1', '--seq 16', '--heads 2', '--head-dim 8', '--impl reference,flash'],
      });
      assert.equal(results.rows.length, 4, 'H=128 only (quick): causal and not, reference and flash');
      for (const row of results.rows) {
        assert.equal(row.status, 'ok', row.reason);
        assert.equal(row.pass, 'backward');
        assert.deepEqual([row.B, row.T, row.N, row.H], [1, 16, 2, 8]);
      }
    } finally {
      rmSync(out, { recursive: true, force: true });
    }
  });
});
