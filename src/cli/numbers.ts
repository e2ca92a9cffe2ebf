/**
 * Numbers from the command line, read strictly: `Number()` takes '' as 0, '0x10' as 16 and '1e3'
 * as 1000, and a count of 0 repeats or a NaN budget would run and then report nonsense. Each
 * parser names the option, what it takes and what came, in one line.
 */
import { InvalidArgumentError } from '../errors.js';

const INTEGER = /^[+-]?\d+$/;
const DECIMAL = /^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/;

/** Seeds stay below 2^32 / 3: bench derives the seeds of Q, K and V as 3·seed + 0, 1, 2. */
export const MAX_SEED = 1_000_000_000;

/** An integer in [min, max]. */
export function parseInteger(
  option: string,
  text: string,
  min: number,
  max = Number.MAX_SAFE_INTEGER,
): number {
  const value = Number(text);
  if (!INTEGER.test(text.trim()) || !Number.isSafeInteger(value) || value < min || value > max) {
    const range =
      max === Number.MAX_SAFE_INTEGER ? `an integer ≥ ${min}` : `an integer from ${min} to ${max}`;
    throw new InvalidArgumentError(option, range, JSON.stringify(text));
  }
  return value;
}

/** A finite number > 0 (`positive`) or ≥ 0. */
export function parseNumber(
  option: string,
  text: string,
  kind: 'positive' | 'non-negative',
  unit = '',
): number {
  const value = Number(text);
  const ok =
    DECIMAL.test(text.trim()) && Number.isFinite(value) && (kind === 'positive' ? value > 0 : value >= 0);
  if (!ok) {
    const what = kind === 'positive' ? 'a finite number > 0' : 'a finite number ≥ 0';
    throw new InvalidArgumentError(option, unit ? `${what} (${unit})` : what, JSON.stringify(text));
  }
  return value;
}
