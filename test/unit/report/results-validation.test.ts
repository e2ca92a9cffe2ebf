/**
 * Results files that are valid JSON but not what attnlab writes: a report must refuse them in one
 * typed line (or read them as what they say) rather than crash or show numbers the file contradicts.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { makeResults } from '../../../src/bench/results.js';
import { reloadConfig } from '../../../src/config.js';
import { InvalidArgumentError } from '../../../src/errors.js';
import { writeReport } from '../../../src/report/write.js';
import type { ResultRow } from '../../../src/results/schema.js';
import { parseResults } from '../../../src/results/validate.js';

process.env.ATTNLAB_DISABLE_CUDA = '1';
reloadConfig();

/** A results file as JSON, written to with fields of the wrong type and shape. */
// biome-ignore lint/suspicious/noExplicitAny: the point is to write fields of the wrong type.
type Json = Record<string, any>;

/** A bench file with one ok row: 2e9 flops in 2 ms is 1 TFLOP/s, 50% of a 2 TFLOP/s ceiling. */
function json(): Json {
  const row = {
    sweep: 'bench',
    source: 'attnlab',
    impl: 'flash',
    label: 'attnlab flash bf16',
    B: 1,
    T: 128,
    S: 128,
    N: 8,
    K: 2,
    H: 64,
    dtype: 'bfloat16',
    causal: false,
    status: 'ok',
    flops: 2e9,
    tflops: 1,
    ceilingPercent: 50,
    timing: {
      method: 'cuda-events',
      ms: { median: 2, p10: 1.9, p90: 2.2, min: 1.8, max: 2.5, mean: 2.05, count: 10 },
      firstCallMs: 5,
      warmup: 5,
      inputCopies: 1,
    },
  } as ResultRow;
  const results = makeResults('bench', {
    rows: [row],
    ceiling: { tflops: 2, dtype: 'bfloat16', source: 'given' },
  });
  return JSON.parse(JSON.stringify(results));
}

function refuses(change: (f: Json) => void, pattern: RegExp): void {
  const f = json();
  change(f);
  assert.throws(
    () => parseResults(f, 'f.json'),
    (e: unknown) => e instanceof InvalidArgumentError && pattern.test(e.message),
  );
}

describe('results files of the wrong shape', () => {
  it('the fixture itself validates and reports', () => {
    const results = parseResults(json(), 'f.json');
    assert.match(writeReport([{ name: 'f', results }]), /flash bf16/);
  });

  it('reads an optional number given as null as absent: the report shows a dash, not a TypeError', () => {
    const f = json();
    f.rows[0].ceilingPercent = null; // what JSON.stringify writes for Infinity
    f.rows[0].bandwidthPercent = null;
    f.rows[0].timing.hostMs = null;
    const results = parseResults(f, 'f.json');
    assert.equal(results.rows[0].ceilingPercent, undefined);
    const text = writeReport([{ name: 'f', results }]);
    assert.match(text, /flash bf16/);
    // The nulls the schema documents stay null.
    f.rows[0].maxError = null;
    assert.equal(parseResults(f, 'f.json').rows[0].maxError, null);
  });

  it('refuses JSON nested far deeper than a results file, in one line instead of a stack overflow', () => {
    let deep: unknown = 1;
    for (let i = 0; i < 100_000; i++) deep = [deep];
    assert.throws(
      () => parseResults(deep, 'f.json'),
      /f\.json: \$: expected JSON nested at most 32 levels deep .*, got a deeply nested array/,
    );
    // Deep where no field is checked (the report copies every string of the file).
    refuses((f) => {
      f.rows[0].extra = deep;
    }, /nested at most 32 levels/);
  });

  it('refuses a failed row whose reason is null', () => {
    refuses((f) => {
      f.rows[0] = { ...f.rows[0], status: 'error', reason: null, timing: undefined, tflops: undefined };
    }, /rows\[0\]\.reason: expected a reason for status error, got null/);
  });

  it('refuses timing percentiles out of order and a mean outside them', () => {
    refuses((f) => {
      f.rows[0].timing.ms.p10 = 20;
    }, /timing\.ms\.median: expected a value ≥ p10 \(20\), got 2/);
    refuses((f) => {
      f.rows[0].timing.ms.min = 3;
    }, /timing\.ms\.p10: expected a value ≥ min \(3\), got 1\.9/);
    refuses((f) => {
      f.rows[0].timing.ms.mean = 9;
    }, /timing\.ms\.mean: expected a value from min \(1\.8\) to max \(2\.5\), got 9/);
  });

  it('refuses two timed rows a chart would draw as one point, a share over 100%, an unexplained peer, a day that does not exist', () => {
    refuses((f) => {
      f.rows.push({ ...f.rows[0], timing: { ...f.rows[0].timing } });
    }, /\$\.rows\[1\]: expected a row of its own \(rows\[0\] has its sweep, label and shape\)/);
    refuses((f) => {
      f.rows[0].timing.power = { cappedPercent: 500, meanWatts: 650, limitWatts: 700 };
    }, /timing\.power\.cappedPercent: expected a share from 0 to 100 \(%\), got 500/);
    refuses((f) => {
      f.peers = [{ name: 'jax', available: false }];
    }, /peers\[0\]\.reason: expected a reason for a peer that did not run, got nothing/);
    refuses((f) => {
      f.createdAt = '2026-02-30T04:40:00Z';
    }, /createdAt: expected an ISO 8601 date/);
    // Another pass or shape is another point.
    const f = json();
    f.rows.push({ ...f.rows[0], pass: 'backward', flops: 5e9, tflops: 2.5, ceilingPercent: 125 });
    // So are a context-parallel row's GPU count and a paged row's block size: a run's own rows
    // must never be refused when it saves them.
    f.rows.push({ ...f.rows[0], gpus: 2 }, { ...f.rows[0], blockSize: 16 });
    assert.equal(parseResults(f, 'f.json').rows.length, 4);
  });

  it('refuses K heads that do not divide N', () => {
    refuses((f) => {
      f.rows[0].K = 3;
    }, /rows\[0\]\.K: expected a divisor of N=8/);
  });

  it('refuses a rate that its own flops and time do not give, and a % peak its ceiling does not', () => {
    refuses((f) => {
      f.rows[0].tflops = 1000;
    }, /rows\[0\]\.tflops: expected flops \/ median = 1\.000 \(to 0\.1%\), got 1000/);
    refuses((f) => {
      f.rows[0].timing.ms = { median: 0, p10: 0, p90: 0, min: 0, max: 0, mean: 0, count: 10 };
    }, /timing\.ms\.median: expected a time > 0 on a row of status 'ok', got 0/);
    refuses((f) => {
      f.rows[0].ceilingPercent = 99;
    }, /ceilingPercent: expected tflops \/ ceiling\.tflops = 50\.00% \(to 0\.1%\), got 99/);
    refuses((f) => {
      f.ceiling = null;
    }, /ceilingPercent: expected no ceilingPercent in a file without a ceiling, got 50/);
  });
});
