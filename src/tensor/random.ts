/**
 * Seeded, deterministic random tensors: the same seed gives the same bits on every machine.
 *
 * The generator is xoshiro128** (32-bit integer arithmetic only, so no platform differences), seeded
 * through splitmix32. Normals use Box–Muller with V8's Math.log/cos/sin, which are a portable fdlibm
 * port and give the same doubles on every platform for a given Node.js version.
 */
import { InvalidArgumentError } from '../errors.js';
import type { DType } from './dtype.js';
import { numel, Tensor } from './tensor.js';

export class Random {
  #s0: number;
  #s1: number;
  #s2: number;
  #s3: number;

  constructor(seed: number) {
    if (!Number.isInteger(seed)) throw new InvalidArgumentError('seed', 'an integer', String(seed));
    let x = seed >>> 0;
    const next = (): number => {
      // splitmix32: spreads a small seed over all four state words.
      x = (x + 0x9e3779b9) | 0;
      let z = x;
      z = Math.imul(z ^ (z >>> 16), 0x85ebca6b);
      z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35);
      return (z ^ (z >>> 16)) >>> 0;
    };
    this.#s0 = next();
    this.#s1 = next();
    this.#s2 = next();
    this.#s3 = next();
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
  seed: number;
  dtype?: DType;
}

/** Normal(mean, std) values rounded to `dtype` (default float32), on the CPU. */
export function randomNormal(
  shape: readonly number[],
  options: RandomOptions & { mean?: number; std?: number },
): Tensor {
  const { seed, dtype = 'float32', mean = 0, std = 1 } = options;
  const rng = new Random(seed);
  const values = new Float64Array(numel(shape));
  for (let i = 0; i < values.length; i++) values[i] = mean + std * rng.nextNormal();
  return Tensor.fromArray(values, shape, dtype);
}

/** Uniform [low, high) values rounded to `dtype` (default float32), on the CPU. */
export function randomUniform(
  shape: readonly number[],
  options: RandomOptions & { low?: number; high?: number },
): Tensor {
  const { seed, dtype = 'float32', low = 0, high = 1 } = options;
  const rng = new Random(seed);
  const values = new Float64Array(numel(shape));
  for (let i = 0; i < values.length; i++) values[i] = low + (high - low) * rng.nextFloat();
  return Tensor.fromArray(values, shape, dtype);
}
