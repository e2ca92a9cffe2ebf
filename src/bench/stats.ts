/**
 * Summary statistics of timing samples. Benchmarks report the median with p10/p90 (Triton's
 * `do_bench` reports quantiles for the same reason): GPU timings have a long right tail from clock
 * ramps, other processes and the occasional host stall, which a mean would fold into the headline.
 */
import { InvalidArgumentError } from '../errors.js';
import type { SampleSummary } from '../results/schema.js';

/** summarize()'s result, defined with the results file that records it. */
export type { SampleSummary };

/**
 * The q-quantile (0 ≤ q ≤ 1) of already sorted values, interpolating linearly between the two
 * nearest ranks (numpy's default 'linear' method, so peers and attnlab agree on what p10 means).
 */
export function quantileSorted(sorted: ArrayLike<number>, q: number): number {
  if (sorted.length === 0) throw new InvalidArgumentError('samples', 'at least one sample', 'none');
  if (!(q >= 0 && q <= 1)) throw new InvalidArgumentError('q', 'a number in [0, 1]', String(q));
  const position = (sorted.length - 1) * q;
  const lower = Math.floor(position);
  const upper = Math.ceil(position);
  const weight = position - lower;
  return sorted[lower] + (sorted[upper] - sorted[lower]) * weight;
}

/** The q-quantile of unsorted samples (see {@link quantileSorted}). */
export function quantile(samples: ArrayLike<number>, q: number): number {
  return quantileSorted(sortedCopy(samples), q);
}

/** The median: the middle sample, or the mean of the two middle ones for an even count. */
export function median(samples: ArrayLike<number>): number {
  return quantile(samples, 0.5);
}

/**
 * Median, p10, p90, min, max and mean of samples; throws on an empty set or a non-finite sample
 * (a NaN timing means the measurement itself is broken and must not become a plotted number).
 */
export function summarize(samples: ArrayLike<number>): SampleSummary {
  if (samples.length === 0) throw new InvalidArgumentError('samples', 'at least one sample', 'none');
  for (let i = 0; i < samples.length; i++) {
    if (!Number.isFinite(samples[i])) {
      throw new InvalidArgumentError(`samples[${i}]`, 'a finite number', String(samples[i]));
    }
  }
  const sorted = sortedCopy(samples);
  let sum = 0;
  for (const value of sorted) sum += value;
  return {
    median: quantileSorted(sorted, 0.5),
    p10: quantileSorted(sorted, 0.1),
    p90: quantileSorted(sorted, 0.9),
    min: sorted[0],
    max: sorted[sorted.length - 1],
    mean: sum / sorted.length,
    count: sorted.length,
  };
}

function sortedCopy(samples: ArrayLike<number>): Float64Array {
  return Float64Array.from(samples).sort();
}
