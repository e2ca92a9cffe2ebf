/**
 * Per-tensor FP8 quantisation on the host, the arithmetic the GPU kernels in src/kernels/fp8/ repeat:
 * x8 = saturate(round_to_nearest_even(x · scale)) and x ≈ decode(x8) · scaleInv with scaleInv = 1/scale.
 *
 * Saturation (values past ±max clamp to ±max) is what TransformerEngine and CUDA's __NV_SATFINITE
 * do: a delayed scale is computed from older amax values, so a new outlier must clip, not turn into
 * NaN (e4m3fn has no infinity; its non-saturating overflow is NaN).
 */
import { InvalidArgumentError } from '../../errors.js';
import { decodeArray, encodeOne, type FloatDType, type Fp8DType, isFp8DType } from '../../tensor/dtype.js';
import { Tensor } from '../../tensor/tensor.js';

/** A quantised tensor with the scale that produced it and the amax of the values it came from. */
export interface Quantised {
  /** Raw FP8 codes, same shape as the input. */
  readonly tensor: Tensor;
  readonly scale: number;
  /** 1/scale: multiply decoded values by it to get back to the input's units. */
  readonly scaleInv: number;
  /** max |x| over the input before scaling (NaN is skipped, as the GPU's fmaxf skips it). */
  readonly amax: number;
}

function checkScale(scale: number): void {
  if (typeof scale !== 'number' || !Number.isFinite(scale) || scale <= 0) {
    throw new InvalidArgumentError('scale', 'a finite positive number', String(scale));
  }
}

/** max |x| over values (0 for an empty array; NaN entries are skipped). */
export function absMax(values: ArrayLike<number>): number {
  let amax = 0;
  for (let i = 0; i < values.length; i++) {
    const a = Math.abs(values[i]);
    if (a > amax) amax = a;
  }
  return amax;
}

/**
 * Quantises values (float64, in the input's units) to FP8 with a per-tensor scale, saturating.
 *
 * @example
 * const { tensor, amax } = quantiseValues([1, -1000, 0.01], [3], 0.5, 'float8_e4m3fn');
 * // codes decode to [0.5, -448 (saturated from -500), 0.005859375 (3 · 2^-9)]; amax 1000
 */
export function quantiseValues(
  values: ArrayLike<number>,
  shape: readonly number[],
  scale: number,
  dtype: Fp8DType = 'float8_e4m3fn',
): Quantised {
  checkScale(scale);
  if (!isFp8DType(dtype))
    throw new InvalidArgumentError('dtype', 'float8_e4m3fn or float8_e5m2', String(dtype));
  const codes = new Uint8Array(values.length);
  const SATURATE = { saturate: true };
  // The GPU multiplies in float32 and then rounds to FP8; doing the same here (not one float64
  // product) keeps the rare double-rounding ties identical, so host and GPU codes match bit for bit.
  const scale32 = Math.fround(scale);
  for (let i = 0; i < values.length; i++) {
    codes[i] = encodeOne(Math.fround(values[i] * scale32), dtype, SATURATE);
  }
  return {
    tensor: Tensor.fromRaw(codes, shape, dtype),
    scale: scale32,
    scaleInv: 1 / scale32,
    amax: absMax(values),
  };
}

/** Quantises a host or device tensor (read through the host) to FP8 with a per-tensor scale. */
export function quantiseTensor(tensor: Tensor, scale: number, dtype: Fp8DType = 'float8_e4m3fn'): Quantised {
  return quantiseValues(tensor.toFloat64Array(), tensor.shape, scale, dtype);
}

/** decode(x8) · scaleInv (a float32 product): the values the FP8 codes stand for, in the input's units. */
export function dequantiseValues(codes: Tensor, scaleInv: number): Float64Array {
  if (!isFp8DType(codes.dtype)) {
    throw new InvalidArgumentError('codes.dtype', 'float8_e4m3fn or float8_e5m2', codes.dtype);
  }
  const values = decodeArray(codes.toHost().data, codes.dtype);
  // float32 product, as the dequantising kernel computes it (FP8 values are exact in float32).
  const scaleInv32 = Math.fround(scaleInv);
  for (let i = 0; i < values.length; i++) values[i] = Math.fround(values[i] * scaleInv32);
  return values;
}

/** decode(x8) · scaleInv rounded to `dtype` (bfloat16 by default): the module's dequantising step. */
export function dequantiseTensor(codes: Tensor, scaleInv: number, dtype: FloatDType = 'bfloat16'): Tensor {
  return Tensor.fromArray(dequantiseValues(codes, scaleInv), codes.shape, dtype);
}
