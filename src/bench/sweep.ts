/**
 * Benchmarks as data: what varies, over which values, what is fixed. A sweep spec holds one list of
 * values per dimension; expanding it gives the cartesian product as a list of cases, sizes outermost
 * and the implementation innermost, so the rows that a chart compares are measured back to back.
 */

import { IMPLEMENTATIONS, type Implementation, type ProblemSize } from '../backends/problem.js';
import { InvalidArgumentError } from '../errors.js';
import { FLOAT_DTYPES, type FloatDType } from '../tensor/dtype.js';

/** One shape, dtype and mask to time with one implementation. Letters as in src/backends/problem.ts. */
export interface BenchCase extends ProblemSize {
  readonly dtype: FloatDType;
  readonly causal: boolean;
  readonly impl: Implementation;
  /** Key and value as a paged cache of blocks of this many tokens (paged-inputs.ts); absent: dense. */
  readonly blockSize?: number;
}

/** The values each dimension takes. `kvSeq` and `kvHeads` default to `seq` and `heads` (S = T, K = N). */
export interface SweepSpec {
  readonly batch: readonly number[];
  readonly seq: readonly number[];
  readonly kvSeq?: readonly number[];
  readonly heads: readonly number[];
  readonly kvHeads?: readonly number[];
  readonly headDim: readonly number[];
  readonly dtype: readonly FloatDType[];
  readonly causal: readonly boolean[];
  readonly impl: readonly Implementation[];
  /** Paged caches of these block sizes instead of dense key and value (absent: dense). */
  readonly blockSize?: readonly number[];
}

/** A combination the spec produced that is not a valid problem, and why. */
export interface SkippedCase {
  readonly case: Omit<BenchCase, 'impl'>;
  readonly reason: string;
}

/**
 * The most cases one sweep may expand to. Each case is timed for at least a few calls, so 100,000 is days of
 * measuring at 1 s a case; far past it the case list itself outgrows the heap (ranges on four options to 2^52
 * are 53^4 ≈ 7.9 million cases per implementation).
 */
export const MAX_SWEEP_CASES = 100_000;

/** How many cases `spec` expands to, from its list lengths, before any is made. */
export function sweepSize(spec: SweepSpec): number {
  return (
    spec.dtype.length *
    spec.causal.length *
    spec.batch.length *
    spec.heads.length *
    (spec.kvHeads ?? [0]).length *
    spec.headDim.length *
    spec.seq.length *
    (spec.kvSeq ?? [0]).length *
    (spec.blockSize ?? [0]).length *
    spec.impl.length
  );
}

/** Refuses a spec of more than MAX_SWEEP_CASES cases, naming its size and each list's length. */
export function checkSweepSize(spec: SweepSpec, name = 'the sweep'): void {
  const size = sweepSize(spec);
  if (size <= MAX_SWEEP_CASES) return;
  const lists = [
    ['--batch', spec.batch],
    ['--seq', spec.seq],
    ['--kv-seq', spec.kvSeq],
    ['--heads', spec.heads],
    ['--kv-heads', spec.kvHeads],
    ['--head-dim', spec.headDim],
    ['--block-size', spec.blockSize],
    ['--dtype', spec.dtype],
    ['--causal', spec.causal],
    ['--impl', spec.impl],
  ] as const;
  const counts = lists.filter(([, l]) => l && l.length > 1).map(([o, l]) => `${o} ${l?.length}`);
  throw new InvalidArgumentError(
    name,
    `at most ${MAX_SWEEP_CASES.toLocaleString('en-US')} cases (the product of the lists' lengths)`,
    `${size.toLocaleString('en-US')} cases (${counts.join(' × ')})`,
  );
}

/** Every case of the spec in measuring order, and the combinations left out (N not a multiple of K). */
export function expandSweep(spec: SweepSpec): { cases: BenchCase[]; skipped: SkippedCase[] } {
  checkSweepSize(spec);
  const cases: BenchCase[] = [];
  const skipped: SkippedCase[] = [];
  for (const dtype of spec.dtype) {
    for (const causal of spec.causal) {
      for (const B of spec.batch) {
        for (const N of spec.heads) {
          for (const K of spec.kvHeads ?? [N]) {
            for (const H of spec.headDim) {
              for (const T of spec.seq) {
                for (const S of spec.kvSeq ?? [T]) {
                  const shape = { B, T, S, N, K, H, dtype, causal };
                  if (N % K !== 0) {
                    skipped.push({ case: shape, reason: `N=${N} is not a multiple of K=${K}` });
                    continue;
                  }
                  for (const blockSize of spec.blockSize ?? [undefined])
                    for (const impl of spec.impl)
                      cases.push({ ...shape, impl, ...(blockSize ? { blockSize } : {}) });
                }
              }
            }
          }
        }
      }
    }
  }
  return { cases, skipped };
}

/**
 * The largest value each size list takes (each item and each range's end): far past any shape that fits in
 * memory, and small enough that a typo (`--seq 1..4503599627370496`) is one line, not a sweep that dies of
 * V8 heap exhaustion. docs/guide/cli.md lists them.
 */
export const LIST_MAX: Readonly<Record<string, number>> = {
  '--batch': 65_536,
  '--seq': 16_777_216,
  '--kv-seq': 16_777_216,
  '--heads': 65_536,
  '--kv-heads': 65_536,
  '--head-dim': 65_536,
  '--block-size': 16_777_216,
};

/**
 * A list of positive integers from a command-line value: `64,128,256`, or `64..1024` for 64 doubled
 * while it stays ≤ 1024 (sizes that double are what attention sweeps use; `3..10` is 3, 6: the end is
 * included only when the doubling reaches it), or a mix: `1,2..16`. Each value once, first order kept;
 * every value and every range's end at most LIST_MAX[option] (2^53 − 1 for an option not there).
 */
export function parseIntList(option: string, text: string): number[] {
  const max = LIST_MAX[option] ?? Number.MAX_SAFE_INTEGER;
  const values: number[] = [];
  for (const part of splitList(option, text)) {
    const range = /^(\d+)\.\.(\d+)$/.exec(part);
    if (range) {
      const [from, to] = [Number(range[1]), Number(range[2])];
      if (from < 1 || to < from) {
        throw new InvalidArgumentError(option, 'a range a..b with 1 ≤ a ≤ b', JSON.stringify(part));
      }
      // Past 2^53 − 1 the end is no longer the integer typed (1..9007199254740993 read as a ≤ b failing).
      if (!Number.isSafeInteger(to) || to > max) {
        throw new InvalidArgumentError(option, `a range a..b with b ≤ ${max}`, JSON.stringify(part));
      }
      for (let v = from; v <= to; v *= 2) values.push(v);
      continue;
    }
    if (
      !/^\d+$/.test(part) ||
      Number(part) < 1 ||
      !Number.isSafeInteger(Number(part)) ||
      Number(part) > max
    ) {
      throw new InvalidArgumentError(
        option,
        `integers in [1, ${max}] such as 64,128, or a range 64..1024`,
        JSON.stringify(part),
      );
    }
    values.push(Number(part));
  }
  return unique(values);
}

/** `true`, `false` or `true,false`: exactly these spellings (a `yes` or a `1` is refused, not guessed). */
export function parseBoolList(option: string, text: string): boolean[] {
  return unique(
    splitList(option, text).map((part) => {
      if (part === 'true') return true;
      if (part === 'false') return false;
      throw new InvalidArgumentError(option, "'true', 'false' or 'true,false'", JSON.stringify(part));
    }),
  );
}

/** Short dtype names a command line takes for the full ones (bench --dtype, check --dtype). */
export const DTYPE_ALIASES: Readonly<Record<string, FloatDType>> = {
  bf16: 'bfloat16',
  fp16: 'float16',
  f16: 'float16',
  f32: 'float32',
  fp32: 'float32',
  f64: 'float64',
  fp8: 'float8_e4m3fn',
};

/** Float dtypes by name, or by a short name of DTYPE_ALIASES (`bf16` for bfloat16, `fp8` for float8_e4m3fn). */
export function parseDTypeList(option: string, text: string): FloatDType[] {
  return unique(
    splitList(option, text).map((part) => {
      const dtype = DTYPE_ALIASES[part.toLowerCase()] ?? part;
      if (!(FLOAT_DTYPES as readonly string[]).includes(dtype)) {
        throw new InvalidArgumentError(
          option,
          `one of ${FLOAT_DTYPES.join(', ')} (or ${Object.keys(DTYPE_ALIASES).join(', ')})`,
          part,
        );
      }
      return dtype as FloatDType;
    }),
  );
}

/** Values in first-seen order without repeats: `bf16,bfloat16` is one dtype, measured once. */
function unique<T>(values: T[]): T[] {
  return [...new Set(values)];
}

/** attnlab implementations by name (reference, naive, flash, cudnn). */
export function parseImplList(option: string, text: string): Implementation[] {
  return splitList(option, text).map((part) => {
    if (!(IMPLEMENTATIONS as readonly string[]).includes(part)) {
      throw new InvalidArgumentError(option, `one of ${IMPLEMENTATIONS.join(', ')}`, JSON.stringify(part));
    }
    return part as Implementation;
  });
}

/**
 * The comma-separated items of a list option, trimmed, in the order given, each once. An empty item
 * (`1,,2`, `cpu,`) is refused rather than skipped: it is most often a value that went missing.
 */
export function splitList(option: string, text: string): string[] {
  const parts = text.split(',').map((p) => p.trim());
  if (parts.some((p) => p.length === 0)) {
    throw new InvalidArgumentError(
      option,
      'a comma-separated list without empty items',
      JSON.stringify(text),
    );
  }
  return unique(parts);
}
