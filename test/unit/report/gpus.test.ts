/**
 * The GPU a results file was measured on (machine.gpu.uuid) in the reports: a row of the machine table, and a
 * note where a comparison's files name more than one GPU (src/report/gpus.ts), in the terminal text and the
 * HTML. Files without a UUID (before 2026-12-02) add none.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { makeResults } from '../../../src/bench/results.js';
import { reloadConfig } from '../../../src/config.js';
import type { NamedResults } from '../../../src/report/charts.js';
import { gpuMismatchNote, gpuUuids } from '../../../src/report/gpus.js';
import { buildHtmlReport } from '../../../src/report/html.js';
import { writeReport } from '../../../src/report/write.js';
import { parseResults } from '../../../src/results/validate.js';

process.env.ATTNLAB_DISABLE_CUDA = '1';
reloadConfig();

const A = 'GPU-1fdea520-81c5-69c8-0529-9a5edbbe6109';
const B = 'GPU-00010203-0405-0607-0809-0a0b0c0d0e0f';
function file(name: string, uuid?: string): NamedResults {
  const results = makeResults('bench', { rows: [] });
  results.machine.device = 'cuda';
  results.machine.gpu = {
    name: 'NVIDIA H200',
    computeCapability: '9.0',
    memoryBytes: 150e9,
    ...(uuid && { uuid }),
  };
  return { name, results };
}

describe('GPU identity in reports', () => {
  it('lists the distinct UUIDs, and notes a comparison across GPUs only', () => {
    assert.deepEqual(gpuUuids([file('a', A), file('b', A), file('c')]), [A]);
    assert.equal(gpuMismatchNote([file('a', A), file('b', A), file('old')]), undefined);
    const note = gpuMismatchNote([file('a', A), file('b', B)]);
    assert.match(note ?? '', new RegExp(`2 different GPUs \\(a on ${A}, b on ${B}\\)`));
  });
  it('shows the UUID beside the device and the note in the terminal text and the HTML', () => {
    const files = [file('a', A), file('b', B)];
    const text = writeReport(files);
    assert.match(text, new RegExp(`GPU UUID.*${A}`));
    assert.match(text, /note: these files were measured on 2 different GPUs/);
    assert.doesNotMatch(writeReport([file('a', A)]), /different GPUs/);
    const html = buildHtmlReport(files);
    assert.match(html, new RegExp(`<td>GPU UUID</td><td>${A}</td>`));
    assert.match(html, /<li>these files were measured on 2 different GPUs/);
  });
  it('is a field the results schema takes', () => {
    assert.doesNotThrow(() => parseResults(file('a', A).results, 'a.json'));
    const bad = file('a').results;
    (bad.machine.gpu as unknown as Record<string, unknown>).uuid = 7;
    assert.throws(() => parseResults(bad, 'bad.json'), /uuid/);
  });
});
