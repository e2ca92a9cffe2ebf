/**
 * The checks a tensor is built through: shapes, values for a dtype, encode options, and host
 * allocations that say how much was asked when they cannot be made.
 */
import {
  checkKeys,
  checkOptionsObject,
  describeValue,
  readCaller,
  refuseRevoked,
  snapshotList,
} from '../arguments.js';
import { InvalidArgumentError, OutOfMemoryError } from '../errors.js';
import { allocRaw, type DType, type EncodeOptions, itemSize, type RawArray } from './dtype.js';
import { stableView, typedLength } from './host-view.js';

/**
 * Free and total host memory for an OutOfMemoryError: node:os where the runtime has it (Node's
 * process.getBuiltinModule), zeros in a browser, so this module imports no Node built-in.
 */
function hostMemory(): [number, number] {
  const proc = (globalThis as { process?: { getBuiltinModule?(id: string): unknown } }).process;
  const os = proc?.getBuiltinModule?.('node:os') as typeof import('node:os') | undefined;
  return os ? [os.freemem(), os.totalmem()] : [0, 0];
}

/** Elements of a shape (1 for rank 0). */
export function numel(shape: readonly number[]): number {
  let n = 1;
  for (let d = 0; d < shape.length; d++) n *= shape[d];
  return n;
}

export const shapeText = (shape: readonly number[]): string => `[${shape.join(', ')}]`;

/**
 * An array of non-negative safe integers, as a frozen copy read once (the only shape its caller uses after
 * this); each bad entry is named with its index.
 */
export function checkShape(argument: string, shapeIn: unknown): readonly number[] {
  // Not remembered: the shape stays with its tensor (copyValue, arguments.ts).
  const shape = snapshotList(argument, shapeIn, 'an array of non-negative integers', false);
  for (let d = 0; d < shape.length; d++) {
    const size = shape[d];
    if (typeof size !== 'number' || !Number.isSafeInteger(size) || size < 0) {
      throw new InvalidArgumentError(`${argument}[${d}]`, 'a non-negative integer', describeValue(size));
    }
  }
  return shape as readonly number[];
}

/**
 * Storage for `length` elements of `dtype` on the host. A size the process cannot hold is an
 * OutOfMemoryError with the bytes asked (V8 refuses typed arrays past its limit with a RangeError).
 */
export function allocHost(dtype: DType, shape: readonly number[]): RawArray {
  const length = numel(shape);
  const bytes = length * itemSize(dtype);
  const detail = `shape ${shapeText(shape)} ${dtype}`;
  if (!Number.isSafeInteger(length)) throw new OutOfMemoryError(bytes, ...hostMemory(), 'cpu', detail);
  try {
    return allocRaw(dtype, length);
  } catch (error) {
    if (error instanceof RangeError) throw new OutOfMemoryError(bytes, ...hostMemory(), 'cpu', detail);
    throw error;
  }
}

/** float64 scratch of `shape`'s size, with the same out-of-memory rule. */
export function allocFloat64(shape: readonly number[]): Float64Array {
  return allocHost('float64', shape) as Float64Array;
}

const INT32_MIN = -(2 ** 31);
const INT32_MAX = 2 ** 31 - 1;

/**
 * Numbers for `dtype`, read exactly once into a float64 copy that is checked and then encoded (a getter or a
 * Proxy read twice could hand the check one value and the encoder another: `'x'` stored as NaN). An array or
 * typed array whose every element is a number (booleans too for bool, as 1 and 0). int32 takes finite values
 * in its range (fractions truncate toward zero, as a C, NumPy or PyTorch cast does); NaN, ±Infinity and
 * values outside [-2^31, 2^31-1] are refused rather than wrapped or zeroed.
 */
export function checkValues(
  argument: string,
  values: unknown,
  dtype: DType,
  shape?: readonly number[],
): ArrayLike<number> {
  refuseRevoked(argument, values, 'an array or typed array of numbers');
  const typed = ArrayBuffer.isView(values) && !(values instanceof DataView);
  if (!typed && !Array.isArray(values)) {
    const got = typeof values === 'number' ? `the number ${values}` : describeValue(values);
    throw new InvalidArgumentError(argument, 'an array or typed array of numbers', got);
  }
  if (values instanceof BigInt64Array || values instanceof BigUint64Array) {
    throw new InvalidArgumentError(argument, 'an array or typed array of numbers', describeValue(values));
  }
  // The count first (`shape` given): a wrong one is refused before anything is copied.
  const length = typed ? typedLength(values) : readLength(argument, values as unknown[]);
  if (shape !== undefined && length !== numel(shape)) {
    throw new InvalidArgumentError(
      argument,
      `${numel(shape)} values for shape ${shapeText(shape)}`,
      `${length} values`,
    );
  }
  // A typed array's elements are plain numbers (no getter can sit on an index): a fresh view of its memory,
  // made through the engine's own subarray, has no own property a caller could have set (`length`,
  // Symbol.iterator). Memory another thread may write (a SharedArrayBuffer) is copied, so the value checked
  // is the value encoded.
  const copy = typed
    ? stableView(values as unknown as RawArray)
    : readArray(argument, values as unknown[], length, dtype);
  if (dtype === 'int32') {
    for (let i = 0; i < copy.length; i++) {
      const v = copy[i];
      if (!(v >= INT32_MIN && v < INT32_MAX + 1)) {
        throw new InvalidArgumentError(
          `${argument}[${i}]`,
          `a finite number in int32's range [${INT32_MIN}, ${INT32_MAX}]`,
          describeValue(v),
        );
      }
    }
  }
  return copy;
}

/** An array's length, read once. */
function readLength(argument: string, values: unknown[]): number {
  const length: unknown = readCaller(`${argument}.length`, () => values.length);
  if (typeof length !== 'number' || !Number.isSafeInteger(length) || length < 0) {
    throw new InvalidArgumentError(`${argument}.length`, 'a non-negative integer', describeValue(length));
  }
  return length;
}

/** An array's first `length` elements, each read once, into float64; each bad one named by its index. */
function readArray(argument: string, values: unknown[], length: number, dtype: DType): Float64Array {
  const copy = allocFloat64([length]);
  for (let i = 0; i < length; i++) {
    const name = `${argument}[${i}]`;
    const v = readCaller(name, () => values[i]);
    if (typeof v === 'number') copy[i] = v;
    else if (dtype === 'bool' && typeof v === 'boolean') copy[i] = v ? 1 : 0;
    else throw new InvalidArgumentError(name, `a number (for ${dtype})`, describeValue(v));
  }
  return copy;
}

export function checkEncodeOptions(argument: string, options: unknown): EncodeOptions {
  const o = checkOptionsObject<EncodeOptions>(argument, options, 'an object { saturate? } (or undefined)');
  checkKeys(argument, o, ['saturate']);
  if (o.saturate !== undefined && typeof o.saturate !== 'boolean') {
    throw new InvalidArgumentError(`${argument}.saturate`, 'a boolean', describeValue(o.saturate));
  }
  return o;
}
