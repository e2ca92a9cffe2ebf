/**
 * Impossible numbers and selections that match nothing, refused in one line before any work. The
 * commands run in this process through main() (what bin.ts calls), which keeps a table of many
 * cases fast; failures.test.ts spawns the CLI where the process itself is the point.
 */
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { main } from '../../../src/cli/main.js';
import { displayNames } from '../../../src/cli/report.js';
import { reloadConfig } from '../../../src/config.js';
import { loadResults } from '../../../src/results/files.js';

process.env.ATTNLAB_DISABLE_CUDA = '1';
reloadConfig();

/**
 * Runs `attnlab ...args` in this process: its exit code and what it wrote to stderr and stdout. The
 * CLI writes text; under `node --test` this file's results reach the runner through the same stdout as
 * serialized Buffers, written whenever a command awaits (bench yields between cases to hear Ctrl-C), so
 * anything but a string is passed on: swallowed, every suite but the last went unreported, failures too.
 */
async function run(args: string[]): Promise<{ code: number; stderr: string; stdout: string }> {
  const [err, out] = [process.stderr.write, process.stdout.write];
  let stderr = '';
  let stdout = '';
  const capture = (
    stream: NodeJS.WriteStream,
    original: typeof process.stdout.write,
    append: (text: string) => void,
  ) =>
    ((chunk: unknown, ...rest: unknown[]) => {
      if (typeof chunk !== 'string')
        return (original as (...a: unknown[]) => boolean).call(stream, chunk, ...rest);
      append(chunk);
      return true;
    }) as typeof process.stdout.write;
  process.stderr.write = capture(process.stderr, err, (text) => {
    stderr += text;
  });
  process.stdout.write = capture(process.stdout, out, (text) => {
    stdout += text;
  });
  try {
    const code = await main(args);
    return { code, stderr, stdout };
  } finally {
    [process.stderr.write, process.stdout.write] = [err, out];
    process.exitCode = undefined;
  }
}

describe('impossible numbers and selections are refused in one line', () => {
  const cases: [string[], RegExp][] = [
    [['bench', '--repeats', '0'], /--repeats: expected an integer in \[1, 1000000\], got "0"/],
    [['bench', '--repeats', '-3'], /--repeats: expected an integer in \[1, 1000000\]/],
    [['bench', '--repeats', '2.5'], /--repeats: expected an integer/],
    [['bench', '--warmup', 'x'], /--warmup: expected an integer in \[0, 100000\], got "x"/],
    [['bench', '--budget-ms', 'NaN'], /--budget-ms: expected a number in \(0, 3600000\] \(ms\), got "NaN"/],
    [['bench', '--budget-ms', '0'], /--budget-ms: expected a number in \(0, 3600000\]/],
    [['bench', '--settle-ms', '-1'], /--settle-ms: expected a number in \[0, 60000\]/],
    [['bench', '--seed', '1e3'], /--seed: expected an integer in \[0, 1000000000\]/],
    [['bench', '--ceiling', 'Infinity'], /--ceiling: expected a number in \(0, 100000\] \(TFLOP\/s\)/],
    [['bench', '--seq', '99999999999999999999'], /--seq: expected integers in \[1, 16777216\]/],
    [
      ['bench', '--seq', '1..9007199254740993'],
      /--seq: expected a range a\.\.b with b ≤ 16777216, got "1\.\.9007199254740993"$/,
    ],
    [['bench', '--batch', '0'], /--batch: expected integers in \[1, 65536\]/],
    [['bench', '--block-size', '16,0'], /--block-size: expected integers in \[1, 16777216\]/],
    [
      ['bench', '--preset', 'codelab', '--block-size', '16'],
      /--block-size: expected no --block-size beside --preset \(the preset 'codelab' sets the sizes, dtypes and mask\), got "16"/,
    ],
    [['bench', '--preset', 'codelab', '--kv-seq', '4096'], /--kv-seq: expected no --kv-seq beside --preset/],
    // Every option the preset sets is refused, not dropped: these all once exited 0.
    ...['--batch', '--seq', '--heads', '--kv-heads', '--head-dim', '--dtype', '--causal'].map(
      (option): [string[], RegExp] => [
        ['bench', '--preset', 'codelab', option, 'abc'],
        new RegExp(`${option}: expected no ${option} beside --preset .*, got "abc"`),
      ],
    ),
    [
      ['bench', '--preset', 'codelab', '--impl', 'cudnn'],
      /--impl: expected implementations the preset 'codelab' times here \(reference, flash\), got "cudnn"/,
    ],
    [
      ['bench', '--preset', 'codelab', '--impl', 'turbo'],
      /--impl: expected one of reference, naive, flash, cudnn, webgpu, got "turbo"/,
    ],
    [['lab', '--budget-ms', '-5'], /--budget-ms: expected a number in \(0, 3600000\]/],
    [['check', '--seed', 'abc'], /--seed: expected an integer/],
    [
      ['check', '--case', 'no such case anywhere'],
      /--case: expected text found in a case name .*matches none/,
    ],
    [['check', '--device', 'cuda'], /--device: .*cuda \(not available: ATTNLAB_DISABLE_CUDA=1\)/],
    // An empty value is not "not given": each would have been dropped, running the default instead.
    ...[
      ['bench', '--impl'],
      ['bench', '--kv-seq'],
      ['bench', '--kv-heads'],
      ['bench', '--block-size'],
      ['bench', '--peers'],
      ['bench', '--json'],
      ['bench', '--html'],
      ['bench', '--out'],
      ['lab', '--out'],
      ['check', '--device'],
      ['report', 'r.json', '-o'],
    ].map(([...args]): [string[], RegExp] => [
      [...args, ''],
      new RegExp(`${args.at(-1) === '-o' ? '--output' : args.at(-1)}: expected a non-empty <\\w+>, got ""$`),
    ]),
    [['bench', '--impl', ' '], /--impl: expected a non-empty <list>, got " "/],
    [['report', 'a.json', ''], /<results>: expected non-empty values, got \["a\.json",""\]/],
    [
      ['bench', '--batch', '1,,2'],
      /--batch: expected a comma-separated list without empty items, got "1,,2"/,
    ],
    [['bench', '--peers', ','], /--peers: expected a comma-separated list without empty items, got ","/],
    [['check', '--device', 'cpu,'], /--device: expected a comma-separated list without empty items/],
    // An option given twice: commander kept the last value unsaid (--impl flash --impl reference
    // timed reference alone).
    [
      ['bench', '--impl', 'flash', '--impl', 'reference'],
      /--impl: expected --impl once \(a second value would replace the first\), got "flash" and then "reference"$/,
    ],
    [['bench', '--seq=16', '--seq', '32'], /--seq: expected --seq once .*, got "16" and then "32"$/],
    [['lab', '--out', 'a', '--out', 'b'], /--out: expected --out once .*, got "a" and then "b"$/],
    [['check', '--case', 'MQA', '--case', 'GQA'], /--case: expected --case once/],
    [['report', 'r.json', '-o', 'x.html', '--output', 'y.html'], /--output: expected --output once/],
    // Outputs that would be dropped, overwrite each other or replace an input.
    [['lab', '--no-report', '--out', 'labdir'], /--out: expected no --out with --no-report .*, got "labdir"/],
    [
      ['bench', '--out', 'dir', '--json', 'j.json', '--html', 'h.html'],
      /--out: expected no --out beside both --json and --html .*, got "dir"/,
    ],
    [['bench', '--json', 'x', '--html', './x'], /--html: .*got "\.\/x" \(--json names it too\)/],
    [
      ['bench', '--out', 'd', '--html', 'd/bench.json'],
      /--html: .*got "d\/bench\.json" \(--out names it too\)/,
    ],
    [['report', 'a.json', '-o', './a.json'], /--output: .*\(the results file "a\.json" names it too\)/],
    // `-` made a file of that name where stdout was meant.
    ...[
      ['bench', '--json', '-'],
      ['bench', '--html', '-'],
      ['bench', '--out', '-'],
      ['lab', '--out', '-'],
      ['report', 'a.json', '-o', '-'],
    ].map((args): [string[], RegExp] => [
      args,
      /: expected a file path, got "-" \(attnlab writes no results to stdout; \.\/- names a file called -\)$/,
    ]),
    // One results file twice would be compared with itself.
    [
      ['report', 'a.json', 'b.json', './a.json'],
      /<results>: expected a path that no other option or input names, got "\.\/a\.json" \(the results file "a\.json" names it too\)/,
    ],
    // A name that would write outside --out, or a hidden file.
    ...['../escaped', 'a/b', 'a\\b', '.', '..'].map((name): [string[], RegExp] => [
      ['bench', '--name', name, '--out', 'o'],
      /--name: expected a name without \/ or \\ that is not \. or \.\., got /,
    ]),
    [['bench', '--name', ''], /--name: expected a non-empty <text>, got ""/],
    // The name titles the rows' tables and charts too: an escape there would drive the terminal.
    [
      ['bench', '--name', 'red\u001b[31m'],
      /--name: expected a name without control characters, got "red\\u001b\[31m"$/,
    ],
    [
      ['bench', '--name', 'two\nlines'],
      /--name: expected a name without control characters, got "two\\nlines"$/,
    ],
    [
      ['bench', '--pass', 'backward', '--block-size', '16'],
      /--block-size: expected no --block-size with --pass backward \(paged caches are timed on the forward only\), got "16"/,
    ],
    // check: a backend that cannot give a row is refused saying why, not left out of the table.
    [
      ['check', '--impl', 'naive,flash'],
      /--impl: expected backends to check on cpu \(flash\), got "naive" \(naive needs CUDA, which is not usable here: ATTNLAB_DISABLE_CUDA=1\)/,
    ],
    [
      ['check', '--impl', 'cudnn'],
      /got "cudnn" \(cudnn needs CUDA, which is not usable here: ATTNLAB_DISABLE_CUDA=1\)/,
    ],
    [['check', '--impl', 'reference'], /got "reference" \(the float64 reference is the oracle/],
    // check's lists name what they take, and quote what came.
    [
      ['check', '--device', 'gpu'],
      /--device: expected a comma-separated list of cpu, cuda, webgpu, got "gpu"$/,
    ],
    [
      ['check', '--impl', 'turbo'],
      /--impl: expected a comma-separated list of reference, naive, flash, cudnn, webgpu, got "turbo"$/,
    ],
    [
      ['check', '--dtype', 'fp8'],
      /--dtype: expected a comma-separated list of float64, float32, tf32, float16, bfloat16 \(or bf16, fp16, f16, f32, fp32, f64\), got "fp8"$/,
    ],
  ];
  for (const [args, pattern] of cases) {
    it(args.join(' '), async () => {
      const r = await run(args);
      assert.equal(r.code, 1, r.stderr);
      assert.equal(r.stdout, '', 'nothing ran');
      const lines = r.stderr.trimEnd().split('\n');
      assert.equal(lines.length, 1, r.stderr);
      assert.match(lines[0], /^attnlab: InvalidArgumentError: /);
      assert.match(lines[0], pattern);
    });
  }
});

describe('report names each file apart', () => {
  it('by base name, by path where base names clash, and with .json where even those do', () => {
    assert.deepEqual(displayNames(['h200/lab.json', 'cpu/lab.json', 'x.json']), ['h200/lab', 'cpu/lab', 'x']);
    // `a` and `a.json` were both shown as `a`: each chart merged their rows into one series.
    assert.deepEqual(displayNames(['d/a', 'd/a.json']), ['d/a', 'd/a.json']);
    const odd = displayNames(['a.json', 'a', 'd/a.json.json']);
    assert.equal(new Set(odd).size, 3, odd.join(', '));
  });
});

describe('bench --preset', () => {
  it('times only the implementations --impl names', async () => {
    const json = join(mkdtempSync(join(tmpdir(), 'attnlab-preset-')), 'p.json');
    const r = await run([
      'bench',
      '--preset',
      'codelab',
      '--impl',
      'flash',
      '--repeats',
      '1',
      '--warmup',
      '0',
      '--budget-ms',
      '1',
      '--settle-ms',
      '0',
      '--no-check',
      '--no-progress',
      '--json',
      json,
    ]);
    assert.equal(r.code, 0, r.stderr);
    const rows = loadResults(json).rows;
    assert.ok(rows.length > 0);
    assert.deepEqual([...new Set(rows.map((row) => row.impl))], ['flash']);
  });
});

describe('lists', () => {
  it('run each item once, in the order given', async () => {
    const r = await run([
      'check',
      '--device',
      'cpu,cpu',
      '--dtype',
      'float32,float32',
      '--case',
      'MQA',
      '--seed',
      '1',
    ]);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /seed 1: 1 passed, 0 failed/);
  });

  it('check --dtype takes the aliases bench takes', async () => {
    const r = await run(['check', '--dtype', 'f32,fp32', '--case', 'MQA', '--seed', '1']);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /MQA N=8 K=1 .*float32/);
    assert.match(r.stdout, /seed 1: 1 passed, 0 failed/);
  });
});

describe('colour follows one rule: a TTY, and NO_COLOR unset or empty', () => {
  /**
   * Runs `args` with stdout taken for a TTY and NO_COLOR as given, TERM unset as in CI (a library
   * with its own colour rule reading TERM, as cli-table3's did, would then disagree).
   */
  async function onTty(args: string[], noColor: string | undefined) {
    const saved = { isTTY: process.stdout.isTTY, noColor: process.env.NO_COLOR, term: process.env.TERM };
    process.stdout.isTTY = true;
    delete process.env.TERM;
    if (noColor === undefined) delete process.env.NO_COLOR;
    else process.env.NO_COLOR = noColor;
    try {
      return await run(args);
    } finally {
      process.stdout.isTTY = saved.isTTY;
      if (saved.noColor === undefined) delete process.env.NO_COLOR;
      else process.env.NO_COLOR = saved.noColor;
      if (saved.term !== undefined) process.env.TERM = saved.term;
    }
  }
  const folder = mkdtempSync(join(tmpdir(), 'attnlab-color-'));
  const json = join(folder, 'tiny.json');
  const bench = [
    'bench',
    '--batch',
    '1',
    '--seq',
    '16',
    '--heads',
    '2',
    '--head-dim',
    '16',
    '--impl',
    'flash',
    '--repeats',
    '2',
    '--warmup',
    '0',
    '--settle-ms',
    '0',
    '--budget-ms',
    '5',
    '--no-progress',
  ];
  const commands: [string, string[]][] = [
    ['bench', [...bench, '--json', json]],
    ['report', ['report', json, '-o', join(folder, 'r.html')]],
    ['info', ['info']],
    ['check', ['check', '--device', 'cpu', '--case', 'MQA', '--seed', '1']],
  ];
  for (const [name, args] of commands) {
    it(name, async () => {
      const plain = await onTty(args, '1');
      assert.equal(plain.code, 0, plain.stderr);
      assert.ok(!plain.stdout.includes('\u001b['), 'NO_COLOR=1: no escape codes');
      const coloured = await onTty(args, '');
      assert.equal(coloured.code, 0, coloured.stderr);
      assert.ok(coloured.stdout.includes('\u001b['), 'NO_COLOR empty counts as unset: colours on a TTY');
    });
  }
});
