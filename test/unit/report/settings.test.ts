/**
 * The ATTNLAB_* settings a results file was measured under (machine.settings, config.ts RUN_SETTING_VARIABLES):
 * recorded by every results file made while one is set, shown beside the machine in the terminal text and the
 * HTML, and noted where a comparison's files ran under different ones.
 */
import assert from 'node:assert/strict';
import { afterEach, describe, it } from 'node:test';
import { makeResults } from '../../../src/bench/results.js';
import { RUN_SETTING_VARIABLES, reloadConfig, runSettings } from '../../../src/config.js';
import type { NamedResults } from '../../../src/report/charts.js';
import { buildHtmlReport } from '../../../src/report/html.js';
import { settingsLine, settingsMismatchNote } from '../../../src/report/settings.js';
import { writeReport } from '../../../src/report/write.js';
import { parseResults } from '../../../src/results/validate.js';

process.env.ATTNLAB_DISABLE_CUDA = '1';
reloadConfig();

function file(name: string, settings?: Record<string, string>): NamedResults {
  const results = makeResults('bench', { rows: [] });
  if (settings) results.machine.settings = settings;
  else delete results.machine.settings;
  return { name, results };
}

describe('ATTNLAB_* settings in results and reports', () => {
  afterEach(() => {
    delete process.env.ATTNLAB_DEPENDENT_LAUNCH;
    delete process.env.ATTNLAB_DECODE_KERNEL;
  });
  it('records the variables that change what runs, as given, and nothing when none is set', () => {
    assert.deepEqual(
      runSettings({ ATTNLAB_DEPENDENT_LAUNCH: '1', ATTNLAB_COMMIT: 'abc', ATTNLAB_DEBUG: '' }),
      {
        ATTNLAB_DEPENDENT_LAUNCH: '1',
      },
    );
    assert.deepEqual(runSettings({}), {});
    assert.ok(RUN_SETTING_VARIABLES.includes('ATTNLAB_FLASH_TILES'));
    process.env.ATTNLAB_DEPENDENT_LAUNCH = 'splits';
    process.env.ATTNLAB_DECODE_KERNEL = 'tma';
    const made = makeResults('bench', { rows: [] });
    assert.deepEqual(made.machine.settings, {
      ATTNLAB_DECODE_KERNEL: 'tma',
      ATTNLAB_DEPENDENT_LAUNCH: 'splits',
    });
    delete process.env.ATTNLAB_DEPENDENT_LAUNCH;
    delete process.env.ATTNLAB_DECODE_KERNEL;
    assert.equal(makeResults('bench', { rows: [] }).machine.settings, undefined, 'the defaults: no field');
  });
  it('shows them beside the machine and notes a comparison across settings only', () => {
    const tuned = file('a', { ATTNLAB_DEPENDENT_LAUNCH: '1' });
    assert.equal(settingsLine(tuned.results.machine), 'ATTNLAB_DEPENDENT_LAUNCH=1');
    assert.equal(settingsLine(file('b').results.machine), undefined);
    assert.equal(settingsMismatchNote([file('b'), file('c')]), undefined);
    assert.equal(settingsMismatchNote([tuned, file('d', { ATTNLAB_DEPENDENT_LAUNCH: '1' })]), undefined);
    const note = settingsMismatchNote([tuned, file('b')]);
    assert.match(
      note ?? '',
      /different ATTNLAB_\* settings \(a: ATTNLAB_DEPENDENT_LAUNCH=1; b: the defaults\)/,
    );
    const text = writeReport([tuned, file('b')]);
    assert.match(text, /settings\s.*ATTNLAB_DEPENDENT_LAUNCH=1/);
    assert.match(text, /note: these files ran under different ATTNLAB_\* settings/);
    assert.doesNotMatch(writeReport([file('b')]), /settings/);
    const html = buildHtmlReport([tuned, file('b')]);
    assert.match(html, /<td>settings<\/td><td>ATTNLAB_DEPENDENT_LAUNCH=1<\/td>/);
    assert.match(html, /<li>these files ran under different ATTNLAB_\* settings/);
  });
  it('is a field the results schema takes', () => {
    assert.doesNotThrow(() => parseResults(file('a', { ATTNLAB_DEBUG: '1' }).results, 'a.json'));
    const bad = file('a').results;
    (bad.machine as unknown as Record<string, unknown>).settings = { ATTNLAB_DEBUG: 1 };
    assert.throws(() => parseResults(bad, 'bad.json'), /settings/);
  });
});
