/**
 * Seeded, deterministic random tensors: the same seed gives the same bits on every machine.
 *
 * The generator is xoshiro128** (32-bit integer arithmetic only, so no platform differences), seeded
 * through splitmix32. Normals use Box–Muller with V8's Math.log/cos/sin, which are a portable fdlibm
 * port and give the same doubles on every platform for a given Node.js version.
 */
import { checkFinite, checkKeys, checkOptionsObject, describeValue } from '../arguments.js';
import { InvalidArgumentError } from '../errors.js';
import { allocFloat64, checkShape } from './checks.js';
import { assertDType, type DType } from './dtype.js';
import { Tensor } from './tensor.js';

/** (x ^ x>>16)·c1, (x ^ x>>13)·c2, x ^ x>>16: a bijection of 32-bit words (splitmix32's mixer). */
function mix32(x: number): number {
  let z = Math.imul(x ^ (x >>> 16), 0x85ebca6b);
  z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35);
  return (z ^ (z >>> 16)) >>> 0;
}

export class Random {
  #s0: number;
  #s1: number;
  #s2: number;
  #s3: number;

  /**
   * Every safe integer is its own seed (|seed| ≤ 2^53 − 1; no two alias): the low 32 bits go
   * through splitmix32 into the four state words, as they always have (so seeds in [0, 2^32) keep
   * their streams), and the high 32 bits (two's complement for negative seeds) are mixed into words
   * 1–3. Word 0 alone determines the low bits and word 1 then the high bits (mix32 is a bijection),
   * so distinct seeds give distinct states; the first output reads word 1, so it differs at once.
   */
  constructor(seed: number) {
    if (typeof seed !== 'number' || !Number.isSafeInteger(seed)) {
      throw new InvalidArgumentError(
        'seed',
        'an integer in [-(2^53 - 1), 2^53 - 1] (a safe integer)',
        describeValue(seed),
      );
    }
    let x = seed >>> 0;
    const high = Math.floor(seed / 2 ** 32) >>> 0;
    const next = (): number => {
      // splitmix32: spreads a small seed over all four state words.
      x = (x + 0x9e3779b9) | 0;
      return mix32(x);
    };
    // mixHigh(0) = 0 for each word, so a seed below 2^32 keeps its stream.
    const mixHigh = (c: number) => (mix32(high ^ c) ^ mix32(c)) >>> 0;
    this.#s0 = next();
    this.#s1 = (next() ^ mixHigh(0)) >>> 0;
    this.#s2 = (next() ^ mixHigh(0x5bd1e995)) >>> 0;
    this.#s3 = (next() ^ mixHigh(0x27d4eb2f)) >>> 0;
  }

  /** A uniform 32-bit unsigned integer. */
  nextUint32(): number {
    const result = Math.imul(rotl(Math.imul(this.#s1, 5), 7), 9) >>> 0;
    const t = this.#s1 << 9;
    this.#s2 ^= this.#s0;
    this.#s3 ^= this.#s1;
    this.#s1 ^= this.#s2;
    this.#s0 ^= this.#s3;
    this.#s2 ^= t;
    this.#s3 = rotl(this.#s3, 11);
    return result;
  }

  /** Uniform in [0, 1) with 53 random bits. */
  nextFloat(): number {
    const hi = this.nextUint32() >>> 5; // 27 bits
    const lo = this.nextUint32() >>> 6; // 26 bits
    return (hi * 67108864 + lo) / 9007199254740992;
  }

  /** Standard normal (Box–Muller; both values of each pair are used). */
  #spare: number | null = null;
  nextNormal(): number {
    if (this.#spare !== null) {
      const value = this.#spare;
      this.#spare = null;
      return value;
    }
    const u1 = 1 - this.nextFloat(); // (0, 1]: log stays finite
    const u2 = this.nextFloat();
    const r = Math.sqrt(-2 * Math.log(u1));
    this.#spare = r * Math.sin(2 * Math.PI * u2);
    return r * Math.cos(2 * Math.PI * u2);
  }
}

function rotl(x: number, k: number): number {
  return (x << k) | (x >>> (32 - k));
}

export interface RandomOptions {
  /** Any safe integer; distinct seeds give distinct streams. Required: attnlab has no global seed. */
  seed: number;
  dtype?: DType;
}

/** The options object, its keys, the seed (made into a generator) and the dtype, checked in order. */
function checkRandomOptions(
  name: string,
  shapeIn: readonly number[],
  options: unknown,
  extra: readonly string[],
): { rng: Random; dtype: DType; o: Record<string, unknown>; shape: readonly number[] } {
  const shape = checkShape('shape', shapeIn);
  const keys = ['seed', 'dtype', ...extra];
  const o = checkOptionsObject<Record<string, unknown>>(
    'options',
    options,
    `an object { ${keys.join(', ')} }`,
  );
  if (options === undefined) {
    throw new InvalidArgumentError('options', `an object { seed, ... } (${name} needs a seed)`, 'undefined');
  }
  checkKeys('options', o, keys);
  if (o.seed === undefined) {
    throw new InvalidArgumentError('seed', `an integer (${name} has no global seed)`, 'undefined');
  }
  const rng = new Random(o.seed as number);
  const dtype = o.dtype === undefined ? 'float32' : assertDType('dtype', o.dtype);
  return { rng, dtype, o, shape };
}

/** Normal(mean, std) values rounded to `dtype` (default float32), on the CPU. */
export function randomNormal(
  shapeIn: readonly number[],
  options: RandomOptions & { mean?: number; std?: number },
): Tensor {
  const { rng, dtype, o, shape } = checkRandomOptions('randomNormal', shapeIn, options, ['mean', 'std']);
  const mean = checkFinite('mean', o.mean, 0);
  const std = checkFinite('std', o.std, 1);
  if (std < 0) throw new InvalidArgumentError('std', 'a finite number ≥ 0', describeValue(std));
  const values = allocFloat64(shape);
  for (let i = 0; i < values.length; i++) values[i] = mean + std * rng.nextNormal();
  return drawnAs(values, shape, dtype, `mean=${mean}, std=${std}`);
}

/** Uniform [low, high) values rounded to `dtype` (default float32), on the CPU. */
export function randomUniform(
  shapeIn: readonly number[],
  options: RandomOptions & { low?: number; high?: number },
): Tensor {
  const { rng, dtype, o, shape } = checkRandomOptions('randomUniform', shapeIn, options, ['low', 'high']);
  const low = checkFinite('low', o.low, 0);
  const high = checkFinite('high', o.high, 1);
  if (!(high > low) || !Number.isFinite(high - low)) {
    throw new InvalidArgumentError('high', `a finite number above low=${low}`, describeValue(high));
  }
  const values = allocFloat64(shape);
  for (let i = 0; i < values.length; i++) values[i] = low + (high - low) * rng.nextFloat();
  return drawnAs(values, shape, dtype, `low=${low}, high=${high}`);
}

/**
 * The drawn values rounded to `dtype`. A value the dtype cannot hold (int32 past 2^31) is the fault of the
 * options that asked for it, named as such: fromArray's own error names `values`, which these functions do not take.
 */
function drawnAs(values: Float64Array, shape: readonly number[], dtype: DType, asked: string): Tensor {
  try {
    return Tensor.fromArray(values, shape, dtype);
  } catch (error) {
    if (!(error instanceof InvalidArgumentError) || !error.argument.startsWith('values')) throw error;
    throw new InvalidArgumentError(
      'options',
      `a dtype that holds the values ${asked} draws (${dtype}: ${error.expected})`,
      `a drawn value ${error.received}`,
    );
  }
}
