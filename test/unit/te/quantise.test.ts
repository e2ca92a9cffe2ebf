import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { InvalidArgumentError } from '../../../src/errors.js';
import {
  absMax,
  dequantiseTensor,
  dequantiseValues,
  quantiseTensor,
  quantiseValues,
} from '../../../src/te/quantise.js';
import { decodeValue, fp8Max } from '../../../src/tensor/dtype.js';
import { Tensor } from '../../../src/tensor/tensor.js';

const codes = (values: number[], scale: number, dtype: 'float8_e4m3fn' | 'float8_e5m2' = 'float8_e4m3fn') =>
  Array.from(quantiseValues(values, [values.length], scale, dtype).tensor.data);

describe('FP8 quantisation', () => {
  test('format maxima', () => {
    assert.equal(fp8Max('float8_e4m3fn'), 448);
    assert.equal(fp8Max('float8_e5m2'), 57344);
  });

  test('e4m3 codes of hand-picked values (scale 1)', () => {
    // 1.0 = 0.0111.000 (bias 7); 448 = 0.1111.110; 2^-9 is the smallest subnormal (mantissa 001).
    assert.deepEqual(codes([1, 448, -448, 2 ** -9, 0, -0], 1), [0x38, 0x7e, 0xfe, 0x01, 0x00, 0x80]);
  });

  test('e4m3 rounds ties to the even code', () => {
    // 1.0625 lies halfway between 1.0 (0x38, even) and 1.125 (0x39); 1.1875 between 0x39 and 0x3a (even).
    assert.deepEqual(codes([1.0625, 1.1875, 1.06251], 1), [0x38, 0x3a, 0x39]);
  });

  test('e4m3 saturates out-of-range values and infinities; NaN stays NaN', () => {
    assert.deepEqual(
      codes([449, 464, 1e9, Number.POSITIVE_INFINITY, -1e9], 1),
      [0x7e, 0x7e, 0x7e, 0x7e, 0xfe],
    );
    assert.equal(codes([Number.NaN], 1)[0] & 0x7f, 0x7f);
  });

  test('e5m2 codes, rounding and saturation', () => {
    // 1.0 = 0.01111.00 (bias 15); 57344 = 0.11110.11; 1.125 is halfway between 1.0 and 1.25 → 1.0.
    assert.deepEqual(codes([1, 57344, 1e6, 1.125, -1.375], 1, 'float8_e5m2'), [0x3c, 0x7b, 0x7b, 0x3c, 0xbe]);
  });

  test('the scale multiplies before rounding; amax is taken before scaling', () => {
    const q = quantiseValues([1, -1000, 0.01], [3], 0.5);
    assert.deepEqual(Array.from(dequantiseValues(q.tensor, 1)), [0.5, -448, 0.005859375]);
    assert.equal(q.amax, 1000);
    assert.equal(q.scaleInv, 2);
    assert.deepEqual(Array.from(dequantiseValues(q.tensor, q.scaleInv)), [1, -896, 0.01171875]);
  });

  test('every finite e4m3 value survives a round trip through a power-of-two scale', () => {
    const all: number[] = [];
    for (let c = 0; c < 256; c++) {
      const v = decodeValue(c, 'float8_e4m3fn');
      if (!Number.isNaN(v)) all.push(v * 64);
    }
    const q = quantiseValues(all, [all.length], 1 / 64);
    assert.deepEqual(Array.from(dequantiseValues(q.tensor, q.scaleInv)), all);
  });

  test('quantiseTensor reads a bf16 tensor; dequantiseTensor rounds back to bf16', () => {
    const x = Tensor.fromArray([0.1, -2.5, 3.75, 100], [2, 2], 'bfloat16');
    const q = quantiseTensor(x, 4);
    assert.equal(q.tensor.dtype, 'float8_e4m3fn');
    assert.deepEqual(q.tensor.shape, [2, 2]);
    assert.equal(q.amax, 100);
    const back = dequantiseTensor(q.tensor, q.scaleInv, 'bfloat16');
    assert.equal(back.dtype, 'bfloat16');
    // 0.1·4 = 0.3994… (bf16 0.1) → e4m3 0.40625 → /4; 100·4 = 400 → 384 (e4m3 neighbours 384, 416) → 96.
    assert.deepEqual(Array.from(back.toFloat64Array()), [0.1015625, -2.5, 3.75, 96]);
  });

  test('absMax skips NaN and is 0 for an empty array', () => {
    assert.equal(absMax([1, Number.NaN, -3]), 3);
    assert.equal(absMax([]), 0);
  });

  test('bad scales and dtypes are named', () => {
    assert.throws(() => quantiseValues([1], [1], 0), InvalidArgumentError);
    assert.throws(() => quantiseValues([1], [1], Number.NaN), /scale: expected a finite positive number/);
    assert.throws(
      () => quantiseValues([1], [1], 1, 'bfloat16' as never),
      /dtype: expected float8_e4m3fn or float8_e5m2/,
    );
  });
});
