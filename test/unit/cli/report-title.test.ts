/** `report --title` with control characters: written out as text in the HTML, never as raw bytes. */
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { it } from 'node:test';
import { main } from '../../../src/cli/main.js';
import { reloadConfig } from '../../../src/config.js';

process.env.ATTNLAB_DISABLE_CUDA = '1';
reloadConfig();

it('a title holding ESC, BEL and a bidirectional override reaches the report written out', async () => {
  const work = mkdtempSync(join(tmpdir(), 'attnlab-title-'));
  const json = join(work, 'a.json');
  const html = join(work, 'r.html');
  const quiet = ['--budget-ms', '2', '--repeats', '2', '--warmup', '0', '--settle-ms', '0', '--no-progress'];
  const tiny = ['--seq', '16', '--heads', '2', '--head-dim', '16', '--batch', '1', '--impl', 'flash'];
  const write = process.stdout.write;
  process.stdout.write = ((chunk: unknown, ...rest: unknown[]) =>
    typeof chunk === 'string'
      ? true
      : (write as (...a: unknown[]) => boolean).call(process.stdout, chunk, ...rest)) as typeof write;
  try {
    assert.equal(await main(['bench', ...tiny, ...quiet, '--json', json]), 0);
    const title = 'run \u001b]0;owned\u0007 \u202eevil';
    assert.equal(await main(['report', json, '-o', html, '--title', title, '--no-terminal']), 0);
  } finally {
    process.stdout.write = write;
    process.exitCode = undefined;
  }
  const page = readFileSync(html, 'utf8');
  // biome-ignore lint/suspicious/noControlCharactersInRegex: finding control characters is the point
  assert.doesNotMatch(page, /[\u0007\u001b\u202e]/);
  assert.match(page, /run \\x1b\]0;owned\\x07/);
});
