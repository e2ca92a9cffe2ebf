/**
 * Checks a parsed results file against the schema before anything reads it, so that a report never
 * plots a field that is missing or of the wrong type: the error names the file, the JSON path, what
 * was expected and what came.
 */
import { InvalidArgumentError } from '../errors.js';
import { FLOAT_DTYPES } from '../tensor/dtype.js';
import {
  OWN_IMPL,
  PASSES,
  PEER_IMPLS,
  RESULTS_SCHEMA,
  RESULTS_SCHEMA_VERSION,
  type ResultsFile,
} from './schema.js';

type Check = (value: unknown, path: string) => void;

/** Whether the year, month and day of an ISO date exist (Date.parse takes 2026-02-30 as 2 March). */
function realDay(iso: string): boolean {
  const [y, m, d] = iso.slice(0, 10).split('-').map(Number);
  return m >= 1 && m <= 12 && d >= 1 && d <= new Date(Date.UTC(y, m, 0)).getUTCDate();
}

/** Whether `a` is `b` to AGREEMENT (relative), both finite. */
function near(a: number, b: number): boolean {
  return Number.isFinite(a) && Number.isFinite(b) && Math.abs(a - b) <= AGREEMENT * Math.abs(b);
}

/** Optional fields whose null the schema documents (docs/results-schema.md): kept as null. */
const NULLABLE = new Set(['ceiling', 'peakMemoryBytes', 'maxError']);

/** Deeper than this is no results file (the deepest field, rows[].timing.power.limitWatts, is at 5). */
const MAX_DEPTH = 32;

/** Relative slack for numbers a file states twice (a rate beside the time it came from). */
const AGREEMENT = 1e-3;

/** At most 80 characters of `value` as JSON, for an error line ('nothing' when absent). */
function preview(value: unknown): string {
  if (value === undefined) return 'nothing';
  if (depthExceeds(value, 8))
    return Array.isArray(value) ? 'a deeply nested array' : 'a deeply nested object';
  return String(JSON.stringify(value)?.slice(0, 80));
}

/**
 * Whether `value` nests arrays or objects deeper than `limit`, found without recursion: JSON.parse
 * takes `[[[…]]]` 100,000 deep, and a recursive walk of it (JSON.stringify for an error, the
 * report's copy of every string) overflows the stack.
 */
function depthExceeds(value: unknown, limit: number): boolean {
  const stack: [unknown, number][] = [[value, 0]];
  while (stack.length > 0) {
    const [item, depth] = stack.pop() as [unknown, number];
    if (item === null || typeof item !== 'object') continue;
    if (depth >= limit) return true;
    for (const child of Object.values(item)) stack.push([child, depth + 1]);
  }
  return false;
}

class Checker {
  /** Optional fields given as null, removed when the whole file has passed. */
  readonly nulls: [Record<string, unknown>, string][] = [];

  constructor(readonly source: string) {}

  fail(path: string, expected: string, value: unknown): never {
    throw new InvalidArgumentError(`${this.source}: ${path}`, expected, preview(value));
  }

  object(value: unknown, path: string): Record<string, unknown> {
    if (typeof value !== 'object' || value === null || Array.isArray(value))
      this.fail(path, 'an object', value);
    return value as Record<string, unknown>;
  }

  array(value: unknown, path: string, each: Check): void {
    if (!Array.isArray(value)) this.fail(path, 'an array', value);
    value.forEach((item, i) => {
      each(item, `${path}[${i}]`);
    });
  }

  string: Check = (value, path) => {
    if (typeof value !== 'string') this.fail(path, 'a string', value);
  };

  number: Check = (value, path) => {
    if (typeof value !== 'number' || !Number.isFinite(value)) this.fail(path, 'a finite number', value);
  };

  nonNegative: Check = (value, path) => {
    this.number(value, path);
    if ((value as number) < 0) this.fail(path, 'a number ≥ 0', value);
  };

  size: Check = (value, path) => {
    if (!Number.isSafeInteger(value) || (value as number) < 1) this.fail(path, 'a positive integer', value);
  };

  /** A count that may be 0 (settle calls under `--settle-ms 0`). */
  countFromZero: Check = (value, path) => {
    if (!Number.isSafeInteger(value) || (value as number) < 0) this.fail(path, 'an integer ≥ 0', value);
  };

  /** A date and time as Date.toISOString writes it (or with an offset), one that parses. */
  isoDate: Check = (value, path) => {
    const iso = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:\d{2})$/;
    if (typeof value !== 'string' || !iso.test(value) || Number.isNaN(Date.parse(value)) || !realDay(value))
      this.fail(path, 'an ISO 8601 date and time such as 2026-11-30T04:40:00.000Z', value);
  };

  percent: Check = (value, path) => {
    this.nonNegative(value, path);
    if ((value as number) > 100) this.fail(path, 'a share from 0 to 100 (%)', value);
  };

  matches(pattern: RegExp, expected: string): Check {
    return (value, path) => {
      if (typeof value !== 'string' || !pattern.test(value)) this.fail(path, expected, value);
    };
  }

  boolean: Check = (value, path) => {
    if (typeof value !== 'boolean') this.fail(path, 'true or false', value);
  };

  oneOf(values: readonly string[]): Check {
    return (value, path) => {
      if (!values.includes(value as string)) this.fail(path, `one of ${values.join(', ')}`, value);
    };
  }

  /**
   * Checks the listed fields; a field whose name ends in '?' may be absent or null. A null one is
   * removed once the file has passed (`nulls`) unless the schema gives it a meaning (NULLABLE):
   * readers test the others against undefined (a null `ceilingPercent` once reached `.toFixed` and
   * ended `attnlab report` with a TypeError).
   */
  fields(value: unknown, path: string, spec: Record<string, Check>): Record<string, unknown> {
    const obj = this.object(value, path);
    for (const [rawName, check] of Object.entries(spec)) {
      const optional = rawName.endsWith('?');
      const name = optional ? rawName.slice(0, -1) : rawName;
      if (optional && obj[name] === null && !NULLABLE.has(name)) this.nulls.push([obj, name]);
      if (optional && (obj[name] === undefined || obj[name] === null)) continue;
      check(obj[name], `${path}.${name}`);
    }
    return obj;
  }

  record(check: Check): Check {
    return (value, path) => {
      const obj = this.object(value, path);
      for (const [key, item] of Object.entries(obj)) check(item, `${path}.${key}`);
    };
  }
}

/**
 * The results file in `value`, checked field by field; `source` (a file name) prefixes every error.
 * Throws InvalidArgumentError on the first field that does not match docs/results-schema.md.
 */
export function parseResults(value: unknown, source: string): ResultsFile {
  const c = new Checker(source);
  if (depthExceeds(value, MAX_DEPTH)) {
    c.fail('$', `JSON nested at most ${MAX_DEPTH} levels deep (a results file nests 5)`, value);
  }
  const summary: Check = (v, p) => {
    const s = c.fields(v, p, {
      median: c.nonNegative,
      p10: c.nonNegative,
      p90: c.nonNegative,
      min: c.nonNegative,
      max: c.nonNegative,
      mean: c.nonNegative,
      count: c.size,
    }) as Record<'median' | 'p10' | 'p90' | 'min' | 'max' | 'mean', number>;
    // Percentiles of one set of calls are ordered, and the mean lies within them: a file that says
    // otherwise was edited or mis-written, and its numbers cannot all be what was measured.
    const slack = 1e-9 * s.max;
    const order = ['min', 'p10', 'median', 'p90', 'max'] as const;
    for (let i = 1; i < order.length; i++) {
      if (s[order[i]] < s[order[i - 1]] - slack) {
        c.fail(`${p}.${order[i]}`, `a value ≥ ${order[i - 1]} (${s[order[i - 1]]})`, s[order[i]]);
      }
    }
    if (s.mean < s.min - slack || s.mean > s.max + slack) {
      c.fail(`${p}.mean`, `a value from min (${s.min}) to max (${s.max})`, s.mean);
    }
  };
  const timing: Check = (v, p) =>
    c.fields(v, p, {
      method: c.oneOf(['cuda-events', 'performance-now', 'wall-block-until-ready']),
      ms: summary,
      'hostMs?': summary,
      firstCallMs: c.nonNegative,
      warmup: c.nonNegative,
      inputCopies: c.size,
      // `--settle-ms 0` (in its range [0, 60000]) makes 0 settle calls: a row that says so is valid.
      'settleCalls?': c.countFromZero,
      'power?': (w, wp) =>
        c.fields(w, wp, {
          cappedPercent: c.percent,
          meanWatts: c.nonNegative,
          'sampledMs?': c.nonNegative,
          limitWatts: c.nonNegative,
        }),
    });
  const attnlabImpl = c.matches(
    OWN_IMPL,
    'an attnlab backend (reference, naive, flash, cudnn, webgpu) or te, with an optional -variant (te-fp8)',
  );
  const row: Check = (v, p) => {
    const r = c.fields(v, p, {
      sweep: c.string,
      source: c.oneOf(['attnlab', 'jax', 'torch']),
      impl: c.string,
      label: c.string,
      B: c.size,
      T: c.size,
      S: c.size,
      N: c.size,
      K: c.size,
      H: c.size,
      dtype: c.oneOf(FLOAT_DTYPES),
      causal: c.boolean,
      'pass?': c.oneOf(PASSES),
      'blockSize?': c.size,
      status: c.oneOf(['ok', 'unsupported', 'error', 'out-of-memory', 'unavailable']),
      'reason?': c.string,
      'variant?': c.string,
      'timing?': timing,
      flops: c.nonNegative,
      'tflops?': c.nonNegative,
      'ceilingPercent?': c.nonNegative,
      'bandwidthGBs?': c.nonNegative,
      'bandwidthPercent?': c.nonNegative,
      'gpus?': c.size,
      'ranks?': c.size,
      'speedupOverOneGpu?': c.nonNegative,
      'exchange?': c.boolean,
      'peakMemoryBytes?': c.nonNegative,
      'maxError?': c.nonNegative,
      'errorCheck?': c.oneOf(['full', 'sampled', 'none']),
    });
    if (r.source === 'attnlab') attnlabImpl(r.impl, `${p}.impl`);
    else c.oneOf(PEER_IMPLS[r.source as 'jax' | 'torch'])(r.impl, `${p}.impl`);
    // An ok row is one that was timed: its timing and rate are what a report plots.
    if (r.status === 'ok' && (r.timing === undefined || r.timing === null))
      c.fail(`${p}.timing`, "timings on a row of status 'ok'", r.timing);
    if (r.status === 'ok' && (r.tflops === undefined || r.tflops === null))
      c.fail(`${p}.tflops`, "a rate on a row of status 'ok'", r.tflops);
    if (r.status !== 'ok' && (r.reason === undefined || r.reason === null))
      c.fail(`${p}.reason`, `a reason for status ${r.status}`, r.reason);
    if ((r.N as number) % (r.K as number) !== 0)
      c.fail(`${p}.K`, `a divisor of N=${r.N} (N query heads share K key/value heads)`, r.K);
    if (r.status === 'ok') agreesWithTime(r, p);
  };
  /**
   * A rate is `flops / median` (and `ceilingPercent` that rate over the ceiling): a row stating one
   * that its own time and flops do not give would have the report show a made-up number.
   */
  const agreesWithTime = (r: Record<string, unknown>, p: string): void => {
    const median = (r.timing as { ms: { median: number } }).ms.median;
    if (!(median > 0)) c.fail(`${p}.timing.ms.median`, "a time > 0 on a row of status 'ok'", median);
    const tflops = (r.flops as number) / (median * 1e9);
    if (!near(r.tflops as number, tflops)) {
      c.fail(`${p}.tflops`, `flops / median = ${tflops.toPrecision(4)} (to ${AGREEMENT * 100}%)`, r.tflops);
    }
    if (r.ceilingPercent === undefined || r.ceilingPercent === null) return;
    const ceiling = (value as { ceiling?: { tflops: number } }).ceiling?.tflops;
    if (ceiling === undefined || !(ceiling > 0)) {
      c.fail(`${p}.ceilingPercent`, 'no ceilingPercent in a file without a ceiling', r.ceilingPercent);
    }
    const percent = ((r.tflops as number) / (ceiling as number)) * 100;
    if (!near(r.ceilingPercent as number, percent)) {
      c.fail(
        `${p}.ceilingPercent`,
        `tflops / ceiling.tflops = ${percent.toPrecision(4)}% (to ${AGREEMENT * 100}%)`,
        r.ceilingPercent,
      );
    }
  };
  /**
   * Two timed rows of one sweep with one label and shape are one point of one series to a chart,
   * which drew a line through both values at the same size.
   */
  const distinctRows = (rows: Record<string, unknown>[], p: string): void => {
    const first = new Map<string, number>();
    rows.forEach((r, i) => {
      if (r.status !== 'ok') return;
      // Every field that tells two measurements apart, so no row a run writes is refused at its save.
      const key = rowKey(r);
      const earlier = first.get(key);
      if (earlier !== undefined) {
        c.fail(`${p}[${i}]`, `a row of its own (rows[${earlier}] has its sweep, label and shape)`, r.label);
      }
      first.set(key, i);
    });
  };
  const table: Check = (v, p) => {
    const t = c.fields(v, p, {
      title: c.string,
      headers: (h, hp) => c.array(h, hp, c.string),
      'note?': c.string,
    });
    const width = (t.headers as unknown[]).length;
    c.array(t.rows, `${p}.rows`, (r, rp) => {
      c.array(r, rp, c.string);
      if ((r as unknown[]).length !== width) c.fail(rp, `${width} cells (one per header)`, r);
    });
  };
  const top = c.fields(value, '$', {
    schema: c.oneOf([RESULTS_SCHEMA]),
    schemaVersion: c.size,
    kind: c.oneOf(['bench', 'lab']),
    createdAt: c.isoDate,
    command: c.string,
    attnlab: (v, p) => c.fields(v, p, { version: c.string, commit: c.string }),
    machine: (v, p) =>
      c.fields(v, p, {
        hostname: c.string,
        platform: c.string,
        cpu: c.string,
        node: c.string,
        device: c.oneOf(['cuda', 'cpu']),
        'gpu?': (g, gp) =>
          c.fields(g, gp, {
            name: c.string,
            computeCapability: c.string,
            memoryBytes: c.nonNegative,
            'l2Bytes?': c.nonNegative,
            'driver?': c.string,
            'uuid?': c.string,
            'powerLimitWatts?': c.nonNegative,
            'multiprocessors?': c.nonNegative,
            'memoryBandwidthGBs?': c.nonNegative,
          }),
        libraries: c.record(c.string),
        'settings?': c.record(c.string),
      }),
    'suite?': (v, p) =>
      c.fields(v, p, {
        name: c.string,
        gpu: c.string,
        quick: c.boolean,
        overrides: (o, op) => c.array(o, op, c.string),
      }),
    'ceiling?': (v, p) => c.fields(v, p, { tflops: c.nonNegative, dtype: c.string, source: c.string }),
    peers: (v, p) =>
      c.array(v, p, (peer, pp) => {
        const info = c.fields(peer, pp, {
          name: c.oneOf(['jax', 'torch']),
          available: c.boolean,
          'reason?': c.string,
          'python?': c.string,
          'versions?': c.record(c.string),
        });
        // A report says why a peer did not run ('missing: undefined' once).
        if (!info.available && (info.reason === undefined || info.reason === null))
          c.fail(`${pp}.reason`, 'a reason for a peer that did not run', info.reason);
      }),
    rows: (v, p) => {
      c.array(v, p, row);
      distinctRows(v as Record<string, unknown>[], p);
    },
    tables: (v, p) => c.array(v, p, table),
    notes: (v, p) => c.array(v, p, c.string),
    'sections?': (v, p) =>
      c.array(v, p, (s, sp) =>
        c.fields(s, sp, {
          title: c.string,
          text: (t, tp) => c.array(t, tp, c.string),
          tables: (t, tp) => c.array(t, tp, c.string),
          sweeps: (t, tp) => c.array(t, tp, c.string),
        }),
      ),
  });
  if ((top.schemaVersion as number) > RESULTS_SCHEMA_VERSION) {
    c.fail(
      '$.schemaVersion',
      `version ≤ ${RESULTS_SCHEMA_VERSION} (this attnlab's schema)`,
      top.schemaVersion,
    );
  }
  for (const [obj, name] of c.nulls) delete obj[name];
  if (top.ceiling === undefined) top.ceiling = null;
  return top as unknown as ResultsFile;
}

/** What tells two timed rows apart (two ok rows of one key are one point of a chart drawn twice). */
export function rowKey(r: Record<string, unknown>): string {
  // Every field that tells two measurements apart, so no row a run writes is refused at its save.
  const apart = [r.pass ?? 'forward', r.blockSize, r.gpus, r.ranks, r.exchange];
  return JSON.stringify([r.sweep, r.label, r.B, r.T, r.S, r.N, r.K, r.H, ...apart]);
}

/**
 * Why `row` would make a results file invalid (the validator's message for it alone, in a file of that row and
 * `ceiling`), or null where it is a valid row: how a row from another process (a peer) is checked before it joins
 * attnlab's, so that one bad row costs its own place and not the whole save.
 */
export function invalidRowReason(
  row: unknown,
  ceiling: { tflops: number; dtype: string; source: string } | null,
) {
  try {
    parseResults(
      {
        schema: RESULTS_SCHEMA,
        schemaVersion: RESULTS_SCHEMA_VERSION,
        kind: 'bench',
        createdAt: '2026-01-01T00:00:00.000Z',
        command: 'attnlab bench',
        attnlab: { version: '0', commit: 'unknown' },
        machine: { hostname: '-', platform: '-', cpu: '-', node: '-', device: 'cpu', libraries: {} },
        ceiling,
        peers: [],
        rows: [row],
        tables: [],
        notes: [],
      },
      'row',
    );
    return null;
  } catch (error) {
    if (error instanceof InvalidArgumentError) return error.message;
    throw error;
  }
}
