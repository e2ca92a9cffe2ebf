/**
 * Every numeric option has a documented range checked as the command line is read, size lists a largest
 * value, boolean lists exactly 'true' and 'false'. The commands run in this process through main().
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { describe, it } from 'node:test';
import { LIST_MAX, parseBoolList, parseIntList } from '../../../src/bench/sweep.js';
import { main } from '../../../src/cli/main.js';
import { parseOption, RANGES, rangeText } from '../../../src/cli/numbers.js';
import { readConfig, reloadConfig } from '../../../src/config.js';
import { InvalidArgumentError } from '../../../src/errors.js';

process.env.ATTNLAB_DISABLE_CUDA = '1';
reloadConfig();

/** `attnlab ...args` in this process: its exit code and stderr (other writes, the runner's, pass on). */
async function run(args: string[]): Promise<{ code: number; stderr: string }> {
  const original = process.stderr.write;
  let stderr = '';
  process.stderr.write = ((chunk: unknown, ...rest: unknown[]) => {
    if (typeof chunk !== 'string')
      return (original as (...a: unknown[]) => boolean).call(process.stderr, chunk, ...rest);
    stderr += chunk;
    return true;
  }) as typeof process.stderr.write;
  try {
    return { code: await main(args), stderr };
  } finally {
    process.stderr.write = original;
    process.exitCode = undefined;
  }
}

const literal = (text: string) => text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

describe('numeric options are refused past their range, before any work', () => {
  for (const [key, range] of Object.entries(RANGES)) {
    const [command, option] = key.split(' ');
    for (const value of [String(range.max * 10), String(2 ** 53), '1e400']) {
      it(`${key} ${value}`, async () => {
        const r = await run([command, option, value]);
        assert.equal(r.code, 1, r.stderr);
        assert.match(
          r.stderr,
          new RegExp(`${literal(option)}: expected ${literal(rangeText(range))}, got "${literal(value)}"`),
        );
      });
    }
  }
  it('--peer-case-s past setTimeout’s 2^31 − 1 ms is refused (such a timer fires at once and stops the peer)', async () => {
    const r = await run(['bench', '--peer-case-s', '2147484', '--peers', 'torch']);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /--peer-case-s: expected a number in \(0, 86400\] \(s\), got "2147484"/);
  });
  it('each range’s ends: max is taken, past max and (for an open start) min are refused', () => {
    for (const [key, range] of Object.entries(RANGES) as [
      keyof typeof RANGES,
      (typeof RANGES)[keyof typeof RANGES],
    ][]) {
      assert.equal(parseOption(key, String(range.max)), range.max, key);
      const min = String(range.min);
      if ('aboveMin' in range) assert.throws(() => parseOption(key, min), InvalidArgumentError, key);
      else assert.equal(parseOption(key, min), range.min, key);
    }
  });
  it('ATTNLAB_TUNE_BUDGET_MS, the default of tune --budget-ms, has the same range', () => {
    for (const value of ['3600001', '99999999999', '0']) {
      assert.throws(
        () => readConfig({ ATTNLAB_TUNE_BUDGET_MS: value }),
        /ATTNLAB_TUNE_BUDGET_MS: expected an integer number of milliseconds in \[1, 3600000\]/,
      );
    }
    assert.equal(
      readConfig({ ATTNLAB_TUNE_BUDGET_MS: '3600000' }).tuneBudgetMs,
      RANGES['tune --budget-ms'].max,
    );
  });
  it('the guide lists every range', () => {
    const guide = readFileSync(new URL('../../../docs/guide/cli.md', import.meta.url), 'utf8');
    for (const [key, range] of Object.entries(RANGES)) {
      const [command, option] = key.split(' ');
      assert.ok(guide.includes(`\`${command} ${option}\``), `${key} is not in docs/guide/cli.md`);
      assert.ok(
        guide.includes(rangeText(range)),
        `${key}'s range ${rangeText(range)} is not in docs/guide/cli.md`,
      );
    }
    for (const [option, max] of Object.entries(LIST_MAX)) {
      assert.ok(guide.includes(`\`${option}\``) && guide.includes(String(max)), option);
    }
  });
});

describe('size lists and boolean lists', () => {
  it('every size list has a largest value, for items and for ranges', () => {
    for (const [option, max] of Object.entries(LIST_MAX)) {
      assert.deepEqual(parseIntList(option, String(max)), [max]);
      assert.throws(
        () => parseIntList(option, String(max + 1)),
        new RegExp(`${option}: expected integers in \\[1, ${max}\\]`),
      );
      assert.throws(() => parseIntList(option, `1..${max * 2}`), new RegExp(`b ≤ ${max}`));
    }
  });
  it('a batch range to 2^52 is refused at once (expanded, it would exhaust V8’s heap)', async () => {
    const t0 = Date.now();
    const r = await run(['bench', '--batch', `1..${2 ** 52}`]);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /--batch: expected a range a\.\.b with b ≤ 65536/);
    assert.ok(Date.now() - t0 < 5000);
  });
  it('a 100 kB value is quoted in one short line, its start and end kept', async () => {
    const r = await run(['bench', '--seq', '9'.repeat(100_000)]);
    assert.equal(r.code, 1);
    assert.ok(r.stderr.length < 1200, `${r.stderr.length} characters`);
    assert.match(
      r.stderr,
      /^attnlab: InvalidArgumentError: --seq: expected integers in .* characters left out\) … 9+"\n$/,
    );
  });
  it("--causal takes exactly 'true' and 'false'", async () => {
    assert.deepEqual(parseBoolList('--causal', 'true,false'), [true, false]);
    for (const other of ['yes', 'no', '1', '0', 'TRUE', 'False', 'on']) {
      const r = await run(['bench', '--causal', other]);
      assert.equal(r.code, 1, other);
      assert.match(
        r.stderr,
        new RegExp(`--causal: expected 'true', 'false' or 'true,false', got "${other}"`),
      );
    }
  });
});
