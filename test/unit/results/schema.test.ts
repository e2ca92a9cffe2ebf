/** The results schema: what makeResults writes validates; what a reader must not trust is refused. */
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { before, describe, it } from 'node:test';
import { measureAttnlabCase } from '../../../src/bench/measure.js';
import { makeResults } from '../../../src/bench/results.js';
import { reloadConfig } from '../../../src/config.js';
import { InvalidArgumentError } from '../../../src/errors.js';
import { loadResults, saveResults } from '../../../src/results/files.js';
import { RESULTS_SCHEMA_VERSION, type ResultsFile } from '../../../src/results/schema.js';
import { parseResults } from '../../../src/results/validate.js';

process.env.ATTNLAB_DISABLE_CUDA = '1';
reloadConfig();

let results: ResultsFile;
const dir = mkdtempSync(join(tmpdir(), 'attnlab-schema-'));

/** A deep copy with one change, as a reader would receive it from disk. */
// biome-ignore lint/suspicious/noExplicitAny: the point is to write fields of the wrong type.
function mutated(change: (json: Record<string, any>) => void): unknown {
  const copy = JSON.parse(JSON.stringify(results));
  change(copy);
  return copy;
}

before(() => {
  const shape = { B: 1, T: 16, S: 16, N: 2, K: 1, H: 8, dtype: 'float32' as const, causal: true };
  const rows = [
    measureAttnlabCase({ ...shape, impl: 'reference' }, { budgetMs: 5, warmup: 1, minRepeats: 2 }),
    measureAttnlabCase({ ...shape, impl: 'cudnn' }, { budgetMs: 5, warmup: 1, minRepeats: 2 }),
  ];
  results = makeResults('bench', {
    rows,
    tables: [{ title: 'Q/K/V', headers: ['Array', 'Shape'], rows: [['Q', '(1, 16, 2, 8)']] }],
    notes: ['a note'],
  });
});

describe('results schema', () => {
  it('a file made from measured rows validates, with machine, commit and command recorded', () => {
    const parsed = parseResults(JSON.parse(JSON.stringify(results)), 'made.json');
    assert.equal(parsed.schemaVersion, RESULTS_SCHEMA_VERSION);
    assert.equal(parsed.machine.device, 'cpu');
    assert.match(parsed.attnlab.commit, /^([0-9a-f]{7,}(-dirty)?|unknown)$/);
    assert.match(parsed.command, /^attnlab/);
    assert.equal(parsed.rows[0].status, 'ok');
    assert.equal(parsed.rows[0].timing?.method, 'performance-now');
    assert.equal(parsed.rows[1].status, 'unsupported', 'cudnn on a CPU-only machine is a row with a reason');
    assert.match(parsed.rows[1].reason ?? '', /cudnn/);
  });

  it('saveResults and loadResults round-trip the file', () => {
    const path = join(dir, 'sub', 'r.json');
    saveResults(path, results);
    const loaded = loadResults(path);
    assert.deepEqual(loaded.rows, JSON.parse(JSON.stringify(results.rows)));
    assert.ok(readFileSync(path, 'utf8').endsWith('\n'));
  });

  it('names the file and JSON path of a field of the wrong type', () => {
    assert.throws(
      () =>
        parseResults(
          mutated((j) => (j.rows[0].timing.ms.median = 'fast')),
          'bad.json',
        ),
      (e: unknown) => {
        assert.ok(e instanceof InvalidArgumentError);
        assert.equal(e.argument, 'bad.json: $.rows[0].timing.ms.median');
        assert.match(e.message, /expected a finite number, got "fast"/);
        return true;
      },
    );
    assert.throws(
      () =>
        parseResults(
          mutated((j) => delete j.machine),
          'f',
        ),
      /\$\.machine: expected an object, got nothing/,
    );
    assert.throws(
      () =>
        parseResults(
          mutated((j) => (j.rows[0].source = 'tvm')),
          'f',
        ),
      /rows\[0\]\.source: expected one of attnlab, jax, torch/,
    );
    assert.throws(
      () =>
        parseResults(
          mutated((j) => (j.rows[0].B = 0)),
          'f',
        ),
      /rows\[0\]\.B: expected a positive integer/,
    );
    // Decode rows' bandwidth: optional, and a number of at least 0 when present.
    parseResults(
      mutated((j) => Object.assign(j.rows[0], { bandwidthGBs: 2212.5, bandwidthPercent: 46.1 })),
      'f',
    );
    assert.throws(
      () =>
        parseResults(
          mutated((j) => (j.rows[0].bandwidthGBs = -1)),
          'f',
        ),
      /rows\[0\]\.bandwidthGBs/,
    );
    // Context-parallel rows: gpus and ranks positive integers, the speedup a number, exchange a boolean.
    parseResults(
      mutated((j) =>
        Object.assign(j.rows[0], { gpus: 2, ranks: 2, speedupOverOneGpu: 1.86, exchange: false }),
      ),
      'f',
    );
    for (const [field, value, message] of [
      ['gpus', 0, /rows\[0\]\.gpus: expected a positive integer/],
      ['ranks', 1.5, /rows\[0\]\.ranks/],
      ['speedupOverOneGpu', -1, /rows\[0\]\.speedupOverOneGpu/],
      ['exchange', 'no', /rows\[0\]\.exchange/],
    ] as const)
      assert.throws(
        () =>
          parseResults(
            mutated((j) => Object.assign(j.rows[0], { [field]: value })),
            'f',
          ),
        message,
      );
  });

  it('refuses rows that contradict their status, ragged tables and newer schema versions', () => {
    assert.throws(
      () =>
        parseResults(
          mutated((j) => delete j.rows[0].timing),
          'f',
        ),
      /timings on a row of status 'ok'/,
    );
    assert.throws(
      () =>
        parseResults(
          mutated((j) => delete j.rows[1].reason),
          'f',
        ),
      /a reason for status unsupported/,
    );
    assert.throws(
      () =>
        parseResults(
          mutated((j) => j.tables[0].rows.push(['only one'])),
          'f',
        ),
      /tables\[0\]\.rows\[1\]: expected 2 cells/,
    );
    assert.throws(
      () =>
        parseResults(
          mutated((j) => (j.schemaVersion = RESULTS_SCHEMA_VERSION + 1)),
          'f',
        ),
      /schemaVersion: expected version ≤/,
    );
    assert.throws(() => parseResults([], 'f'), /\$: expected an object/);
  });

  it('refuses what a report would misread: untimed ok rows, unknown names, unsafe sizes, bad dates', () => {
    // biome-ignore lint/suspicious/noExplicitAny: the point is to write fields of the wrong type.
    const bad: [(j: Record<string, any>) => void, RegExp][] = [
      [
        (j) => (j.rows[0].timing = null),
        /\$\.rows\[0\]\.timing: expected timings on a row of status 'ok', got null/,
      ],
      [
        (j) => delete j.rows[0].tflops,
        /\$\.rows\[0\]\.tflops: expected a rate on a row of status 'ok', got nothing/,
      ],
      [
        (j) => (j.rows[0].dtype = 'str'),
        /\$\.rows\[0\]\.dtype: expected one of float64, float32, .*, got "str"/,
      ],
      [(j) => (j.rows[0].impl = 'str'), /\$\.rows\[0\]\.impl: expected an attnlab backend .*, got "str"/],
      [
        (j) => Object.assign(j.rows[0], { source: 'torch', impl: 'xla' }),
        /\$\.rows\[0\]\.impl: expected one of flash, cudnn, efficient, math, got "xla"/,
      ],
      [(j) => (j.rows[0].B = 1e308), /\$\.rows\[0\]\.B: expected a positive integer, got 1e\+308/],
      [(j) => (j.rows[0].H = 2 ** 53), /\$\.rows\[0\]\.H: expected a positive integer/],
      [
        (j) => (j.createdAt = 'yesterday'),
        /\$\.createdAt: expected an ISO 8601 date and time .*, got "yesterday"/,
      ],
      [(j) => (j.createdAt = '2026-13-45T99:00:00Z'), /\$\.createdAt: expected an ISO 8601/],
    ];
    for (const [change, message] of bad) assert.throws(() => parseResults(mutated(change), 'f'), message);
    // What the project's own tools write stays valid: a variant suffix, a peer's names, an offset.
    parseResults(
      mutated((j) => Object.assign(j.rows[0], { impl: 'flash-mma' })),
      'f',
    );
    parseResults(
      mutated((j) =>
        Object.assign(j.rows[0], { source: 'jax', impl: 'xla', createdAt: '2026-11-30T04:40:00+01:00' }),
      ),
      'f',
    );
  });

  it('loadResults says which file is not JSON', () => {
    const path = join(dir, 'broken.json');
    writeFileSync(path, '{"schema": ');
    assert.throws(() => loadResults(path), /broken\.json: expected JSON/);
    assert.throws(
      () => loadResults(join(dir, 'missing.json')),
      /results file: expected a readable JSON file/,
    );
  });
});
