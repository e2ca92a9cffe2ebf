/**
 * Element types and their exact conversions.
 *
 * Every narrow format is stored as its raw bits (Uint16Array for float16/bfloat16, Uint8Array for
 * the two FP8 formats) and converted from float64 with round-to-nearest-even, directly, never through
 * float32: going float64 → float32 → bfloat16 rounds twice and can land one ulp off.
 */
import { checkOptionsObject, describeValue } from '../arguments.js';
import { InvalidArgumentError } from '../errors.js';

export type FloatDType = 'float64' | 'float32' | 'float16' | 'bfloat16' | 'float8_e4m3fn' | 'float8_e5m2';
export type DType = FloatDType | 'bool' | 'int32';

export const FLOAT_DTYPES: readonly FloatDType[] = [
  'float64',
  'float32',
  'float16',
  'bfloat16',
  'float8_e4m3fn',
  'float8_e5m2',
];
export const ALL_DTYPES: readonly DType[] = [...FLOAT_DTYPES, 'bool', 'int32'];

export type RawArray = Float64Array | Float32Array | Uint16Array | Uint8Array | Int32Array;

export function isDType(value: unknown): value is DType {
  return typeof value === 'string' && (ALL_DTYPES as readonly string[]).includes(value);
}

export function isFloatDType(dtype: DType): dtype is FloatDType {
  return (FLOAT_DTYPES as readonly string[]).includes(dtype);
}

export function itemSize(dtype: DType): number {
  switch (dtype) {
    case 'float64':
      return 8;
    case 'float32':
    case 'int32':
      return 4;
    case 'float16':
    case 'bfloat16':
      return 2;
    case 'float8_e4m3fn':
    case 'float8_e5m2':
    case 'bool':
      return 1;
  }
}

export function allocRaw(dtype: DType, length: number): RawArray {
  switch (dtype) {
    case 'float64':
      return new Float64Array(length);
    case 'float32':
      return new Float32Array(length);
    case 'int32':
      return new Int32Array(length);
    case 'float16':
    case 'bfloat16':
      return new Uint16Array(length);
    default:
      return new Uint8Array(length);
  }
}

/** A binary floating-point format narrower than float64, described by its fields. */
interface MiniFloat {
  readonly exponentBits: number;
  readonly mantissaBits: number;
  /** IEEE-like formats have infinities and many NaNs; e4m3fn has neither infinity nor NaN but S.1111.111. */
  readonly ieee: boolean;
  readonly max: number;
  /** Smallest normal exponent, 1 - bias. */
  readonly minExponent: number;
}

function ieeeFormat(exponentBits: number, mantissaBits: number): MiniFloat {
  const bias = 2 ** (exponentBits - 1) - 1;
  const maxExponent = 2 ** exponentBits - 2 - bias;
  return {
    exponentBits,
    mantissaBits,
    ieee: true,
    max: (2 - 2 ** -mantissaBits) * 2 ** maxExponent,
    minExponent: 1 - bias,
  };
}

const FORMATS = {
  float16: ieeeFormat(5, 10),
  bfloat16: ieeeFormat(8, 7),
  float8_e5m2: ieeeFormat(5, 2),
  // OCP FP8 E4M3 ("fn": finite, one NaN pattern per sign): bias 7, the all-ones exponent holds
  // normal numbers except mantissa 111, so the largest value is 1.75 · 2^8 = 448.
  float8_e4m3fn: { exponentBits: 4, mantissaBits: 3, ieee: false, max: 448, minExponent: -6 },
} as const satisfies Record<string, MiniFloat>;

export type NarrowDType = keyof typeof FORMATS;

/** The largest finite value of a float dtype. */
export function finiteMax(dtype: FloatDType): number {
  if (!isDType(dtype) || !isFloatDType(dtype)) assertFloat('dtype', dtype);
  if (dtype === 'float64') return Number.MAX_VALUE;
  if (dtype === 'float32') return 3.4028234663852886e38;
  return FORMATS[dtype].max;
}

/** The two FP8 element types. */
export type Fp8DType = 'float8_e4m3fn' | 'float8_e5m2';

export function isFp8DType(dtype: string): dtype is Fp8DType {
  return dtype === 'float8_e4m3fn' || dtype === 'float8_e5m2';
}

/** Largest finite value: 448 for e4m3fn, 57344 for e5m2. */
export function fp8Max(dtype: Fp8DType): number {
  return finiteMax(dtype);
}

const f64 = new Float64Array(1);
const f64Bits = new Uint32Array(f64.buffer);

/** floor(log2(a)) for a positive normal float64, read exactly from its exponent field. */
function exponentOf(a: number): number {
  f64[0] = a;
  return ((f64Bits[1] >>> 20) & 0x7ff) - 1023;
}

function roundHalfEven(x: number): number {
  const floor = Math.floor(x);
  const diff = x - floor;
  if (diff > 0.5) return floor + 1;
  if (diff < 0.5) return floor;
  return floor % 2 === 0 ? floor : floor + 1;
}

/**
 * Encodes a float64 into the bits of a narrow format with round-to-nearest-even.
 * Overflow: IEEE-like formats give ±infinity; e4m3fn gives NaN (as ml_dtypes and the OCP spec's
 * non-saturating mode do). With `saturate`, out-of-range values and infinities clamp to ±max
 * (the OCP spec's saturating mode, CUDA's __NV_SATFINITE); NaN stays NaN.
 */
function encodeMini(value: number, fmt: MiniFloat, saturate: boolean): number {
  const { exponentBits: E, mantissaBits: M } = fmt;
  const signBit = 1 << (E + M);
  const nanBits = fmt.ieee ? (((1 << E) - 1) << M) | (1 << (M - 1)) : (1 << (E + M)) - 1;
  const infBits = ((1 << E) - 1) << M;
  if (Number.isNaN(value)) return nanBits;
  const sign = value < 0 || Object.is(value, -0) ? signBit : 0;
  let a = Math.abs(value);
  if (a === Infinity) {
    if (saturate) a = fmt.max;
    else return sign | (fmt.ieee ? infBits : nanBits);
  }
  // Quantum (distance between neighbours) in a's binade; subnormals share the smallest one.
  const e = a >= 2 ** fmt.minExponent ? exponentOf(a) : fmt.minExponent;
  const quantum = 2 ** (e - M);
  let rounded = roundHalfEven(a / quantum) * quantum;
  if (rounded > fmt.max) {
    if (saturate) rounded = fmt.max;
    else return sign | (fmt.ieee ? infBits : nanBits);
  }
  if (rounded === 0) return sign;
  if (rounded < 2 ** fmt.minExponent) {
    return sign | (rounded / 2 ** (fmt.minExponent - M));
  }
  const re = exponentOf(rounded);
  const bias = 1 - fmt.minExponent;
  const mantissa = rounded / 2 ** (re - M) - 2 ** M;
  return sign | ((re + bias) << M) | mantissa;
}

function decodeMini(bits: number, fmt: MiniFloat): number {
  const { exponentBits: E, mantissaBits: M } = fmt;
  const sign = bits & (1 << (E + M)) ? -1 : 1;
  const exponent = (bits >>> M) & ((1 << E) - 1);
  const mantissa = bits & ((1 << M) - 1);
  const bias = 1 - fmt.minExponent;
  if (fmt.ieee && exponent === (1 << E) - 1) return mantissa === 0 ? sign * Infinity : Number.NaN;
  if (!fmt.ieee && exponent === (1 << E) - 1 && mantissa === (1 << M) - 1) return Number.NaN;
  if (exponent === 0) return sign * mantissa * 2 ** (fmt.minExponent - M);
  return sign * (1 + mantissa / 2 ** M) * 2 ** (exponent - bias);
}

const decodeTables = new Map<NarrowDType, Float64Array>();

/** Every bit pattern decoded once: decoding a tensor is then one table lookup per element. */
function decodeTable(dtype: NarrowDType): Float64Array {
  let table = decodeTables.get(dtype);
  if (!table) {
    const fmt = FORMATS[dtype];
    const count = 1 << (1 + fmt.exponentBits + fmt.mantissaBits);
    table = new Float64Array(count);
    for (let bits = 0; bits < count; bits++) table[bits] = decodeMini(bits, fmt);
    decodeTables.set(dtype, table);
  }
  return table;
}

const f32 = new Float32Array(1);
const f32Bits = new Uint32Array(f32.buffer);

/** bfloat16 from a value already exact in float32: the usual bit trick is then a single rounding. */
function bfloat16FromFloat32(value: number): number {
  f32[0] = value;
  const bits = f32Bits[0];
  if ((bits & 0x7f800000) === 0x7f800000 && bits & 0x007fffff) return ((bits >>> 16) & 0x8000) | 0x7fc0;
  const rounded = bits + 0x7fff + ((bits >>> 16) & 1);
  return (rounded >>> 16) & 0xffff;
}

export interface EncodeOptions {
  /** Clamp out-of-range values and infinities to ±max instead of overflowing (FP8 saturating mode). */
  saturate?: boolean;
}

/**
 * Encodes one float64 into the raw storage value of `dtype`. int32 truncates toward zero and refuses
 * NaN, ±Infinity and values outside its range; bool is 1 for every value but 0 (NaN is true, as in
 * NumPy and PyTorch).
 */
export function encodeValue(value: number, dtype: DType, optionsIn: EncodeOptions = {}): number {
  assertDType('dtype', dtype);
  if (typeof value !== 'number') {
    throw new InvalidArgumentError('value', 'a number', describeValue(value));
  }
  if (dtype === 'int32' && !(value >= -(2 ** 31) && value < 2 ** 31)) {
    throw new InvalidArgumentError(
      'value',
      "a finite number in int32's range [-2147483648, 2147483647]",
      describeValue(value),
    );
  }
  const checked = checkOptionsObject<EncodeOptions>('options', optionsIn, 'an object { saturate?: boolean }');
  if (checked.saturate !== undefined && typeof checked.saturate !== 'boolean') {
    throw new InvalidArgumentError('options.saturate', 'a boolean', describeValue(checked.saturate));
  }
  return encodeOne(value, dtype, checked);
}

/** encodeValue without the checks, for loops over values that were checked once. */
export function encodeOne(value: number, dtype: DType, options: EncodeOptions): number {
  switch (dtype) {
    case 'float64':
      return value;
    case 'float32':
      if (options.saturate && Math.abs(value) > finiteMax('float32')) {
        return Math.sign(value) * finiteMax('float32');
      }
      return Math.fround(value);
    case 'int32':
      return Math.trunc(value);
    case 'bool':
      // Number(): fromArray takes booleans for bool, and `false !== 0` would store false as true.
      // NaN stays true (NaN !== 0), as in NumPy and PyTorch.
      return Number(value) !== 0 ? 1 : 0;
    case 'bfloat16':
      if (!options.saturate && Math.fround(value) === value) return bfloat16FromFloat32(value);
      return encodeMini(value, FORMATS.bfloat16, options.saturate ?? false);
    default:
      return encodeMini(value, FORMATS[dtype], options.saturate ?? false);
  }
}

/** Decodes one raw storage value of `dtype` to float64 (exact for every dtype). */
export function decodeValue(raw: number, dtype: DType): number {
  assertDType('dtype', dtype);
  if (typeof raw !== 'number') throw new InvalidArgumentError('raw', 'a number', describeValue(raw));
  switch (dtype) {
    case 'float64':
    case 'float32':
    case 'int32':
    case 'bool':
      return raw;
    default: {
      const table = decodeTable(dtype);
      if (!Number.isInteger(raw) || raw < 0 || raw >= table.length) {
        throw new InvalidArgumentError(
          'raw',
          `${dtype} bits, an integer in [0, ${table.length - 1}]`,
          describeValue(raw),
        );
      }
      return table[raw];
    }
  }
}

/** Rounds a float64 to the nearest value representable in `dtype` (round-to-nearest-even). */
export function roundTo(value: number, dtype: FloatDType, options: EncodeOptions = {}): number {
  if (!isDType(dtype) || !isFloatDType(dtype)) assertFloat('dtype', dtype);
  return decodeValue(encodeValue(value, dtype, options), dtype);
}

/**
 * roundTo(·, dtype) as a function of one number, without roundTo's per-call checks and encode/decode:
 * the same result for every float64 (round-to-nearest-even, overflow to ±Infinity, or to NaN for e4m3fn as
 * encodeValue does, NaN kept, a zero keeps its sign): 68 ns a call for bfloat16 and 23 ns for float16
 * against roundTo's 2.7 and 2.1 µs. The float64 oracles' same-precision baselines round every logit, weight
 * and output (several per query–key pair): with roundTo they took 8× the float64 reference's time (5.6 s
 * against 0.67 s at T=2048 S=300 N=2 H=128 bfloat16), with rounder about as long as it (0.78 s).
 * Adding 1.5·2^52·q and subtracting it again rounds |x| < 2^52·q to a multiple of the quantum q with
 * float64's own round-to-nearest-even; q is 2^(e−M) in x's binade e, the smallest binade's below it.
 */
export function rounder(dtype: FloatDType): (value: number) => number {
  if (!isDType(dtype) || !isFloatDType(dtype)) assertFloat('dtype', dtype);
  if (dtype === 'float64') return (x) => x;
  if (dtype === 'float32') return Math.fround;
  const fmt: MiniFloat = FORMATS[dtype];
  const { mantissaBits: M, minExponent, max, ieee } = fmt;
  const overflow = ieee ? Infinity : Number.NaN;
  // shifts[e + 1100]: 1.5·2^(52 + e − M) for binade e (clamped to the subnormal quantum below minExponent).
  const shifts = new Float64Array(2200);
  for (let e = -1100; e < 1100; e++) shifts[e + 1100] = 1.5 * 2 ** (52 + Math.max(e, minExponent) - M);
  return (x) => {
    if (Number.isNaN(x)) return x;
    // Past 2·max every value overflows, infinities included (and 1.5·2^(52+e−M) itself would, for e near 1023).
    if (Math.abs(x) >= 2 * max) return x < 0 ? -overflow : overflow;
    f64[0] = x;
    const e = ((f64Bits[1] >>> 20) & 0x7ff) - 1023;
    const c = shifts[e + 1100];
    const rounded = x + c - c;
    if (Math.abs(rounded) > max) return x < 0 ? -overflow : overflow;
    return rounded === 0 ? (x < 0 || Object.is(x, -0) ? -0 : 0) : rounded;
  };
}

function assertFloat(argument: string, value: unknown): never {
  throw new InvalidArgumentError(argument, `one of ${FLOAT_DTYPES.join(', ')}`, describeValue(value));
}

/**
 * Encodes many values (checked by the caller: int32 ones in range) into `out`, by default a new raw
 * storage array of `dtype`.
 */
export function encodeArray(
  values: ArrayLike<number>,
  dtype: DType,
  options: EncodeOptions = {},
  out: RawArray = allocRaw(dtype, values.length),
): RawArray {
  if (dtype === 'float64' || (dtype === 'float32' && !options.saturate)) {
    for (let i = 0; i < values.length; i++) out[i] = values[i];
    return out;
  }
  for (let i = 0; i < values.length; i++) out[i] = encodeOne(values[i], dtype, options);
  return out;
}

/** Decodes a raw storage array to float64. */
export function decodeArray(
  raw: RawArray,
  dtype: DType,
  out: Float64Array = new Float64Array(raw.length),
): Float64Array {
  if (dtype === 'float16' || dtype === 'bfloat16' || dtype === 'float8_e4m3fn' || dtype === 'float8_e5m2') {
    const table = decodeTable(dtype);
    for (let i = 0; i < raw.length; i++) out[i] = table[raw[i]];
  } else {
    for (let i = 0; i < raw.length; i++) out[i] = raw[i];
  }
  return out;
}

export function assertDType(argument: string, value: unknown): DType {
  if (!isDType(value)) {
    throw new InvalidArgumentError(argument, `one of ${ALL_DTYPES.join(', ')}`, describeValue(value));
  }
  return value;
}
