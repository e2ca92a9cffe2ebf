/**
 * Numbers from the command line, read strictly: `Number()` takes '' as 0, '0x10' as 16 and '1e3'
 * as 1000, and a count of 0 repeats or a NaN budget would run and then report nonsense. Every numeric
 * option has a range, in RANGES below (docs/guide/cli.md lists it), checked as the command line is read:
 * a duration past what a timer holds (Node's setTimeout fires at once for more than 2^31 − 1 ms, 24.8 days)
 * or a count that would run for years is one line before any work, never a run that stops or hangs.
 */
import { InvalidArgumentError } from '../errors.js';

const INTEGER = /^[+-]?\d+$/;
const DECIMAL = /^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/;

/** Seeds stay below 2^32 / 3: bench derives the seeds of Q, K and V as 3·seed + 0, 1, 2. */
export const MAX_SEED = 1_000_000_000;

/** One numeric option's range: [min, max], or (min, max] where `aboveMin`; `integer` takes whole numbers only. */
export interface NumberRange {
  readonly min: number;
  readonly max: number;
  readonly aboveMin?: boolean;
  readonly integer?: boolean;
  readonly unit?: string;
}

const HOUR_MS = 3_600_000;
const DAY_S = 86_400;

/**
 * Every numeric option of every command, with its range. The largest durations are a day for a peer's case
 * (its timer must stay below setTimeout's 2^31 − 1 ms) and a week for a CPU case's estimate; an hour of timed
 * calls per case and a minute of settling are far past what any timing needs (defaults: 1 s and 0.3 s).
 */
export const RANGES = {
  'bench --budget-ms': { min: 0, max: HOUR_MS, aboveMin: true, unit: 'ms' },
  'bench --settle-ms': { min: 0, max: 60_000, unit: 'ms' },
  'bench --max-case-s': { min: 0, max: 7 * DAY_S, aboveMin: true, unit: 's' },
  'bench --peer-case-s': { min: 0, max: DAY_S, aboveMin: true, unit: 's' },
  'bench --ceiling': { min: 0, max: 100_000, aboveMin: true, unit: 'TFLOP/s' },
  'bench --warmup': { min: 0, max: 100_000, integer: true },
  'bench --repeats': { min: 1, max: 1_000_000, integer: true },
  'bench --seed': { min: 0, max: MAX_SEED, integer: true },
  'lab --budget-ms': { min: 0, max: HOUR_MS, aboveMin: true, unit: 'ms' },
  'check --seed': { min: 0, max: MAX_SEED, integer: true },
  'check --cases-seed': { min: 0, max: MAX_SEED, integer: true },
  'tune --budget-ms': { min: 1, max: HOUR_MS, integer: true, unit: 'ms' },
} as const satisfies Record<string, NumberRange>;

/** A range as the error and the docs say it: `a number in (0, 3600000] (ms)`. */
export function rangeText(range: NumberRange): string {
  const kind = range.integer ? 'an integer' : 'a number';
  const span = `${range.aboveMin ? '(' : '['}${range.min}, ${range.max}]`;
  return `${kind} in ${span}${range.unit ? ` (${range.unit})` : ''}`;
}

/** `text` as a number in the range of `key` ('bench --budget-ms'), or InvalidArgumentError naming the option. */
export function parseOption(key: keyof typeof RANGES, text: string): number {
  const option = key.slice(key.indexOf(' ') + 1);
  return parseInRange(option, text, RANGES[key]);
}

/** `text` as a number in `range`, or InvalidArgumentError naming `option` with the range and what came. */
export function parseInRange(option: string, text: string, range: NumberRange): number {
  const value = Number(text);
  const pattern = range.integer ? INTEGER : DECIMAL;
  const ok =
    pattern.test(text.trim()) &&
    Number.isFinite(value) &&
    (!range.integer || Number.isSafeInteger(value)) &&
    (range.aboveMin ? value > range.min : value >= range.min) &&
    value <= range.max;
  if (!ok) throw new InvalidArgumentError(option, rangeText(range), JSON.stringify(text));
  return value;
}
