import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { decodeValue, encodeValue, finiteMax, rounder, roundTo } from '../../../src/tensor/dtype.js';

const narrow = [
  ['float16', 16],
  ['bfloat16', 16],
  ['float8_e4m3fn', 8],
  ['float8_e5m2', 8],
] as const;

describe('dtype conversions', () => {
  for (const [dtype, bits] of narrow) {
    it(`${dtype}: every bit pattern survives decode → encode`, () => {
      for (let pattern = 0; pattern < 1 << bits; pattern++) {
        const value = decodeValue(pattern, dtype);
        if (Number.isNaN(value)) {
          assert.ok(Number.isNaN(decodeValue(encodeValue(value, dtype), dtype)));
          continue;
        }
        assert.equal(
          encodeValue(value, dtype),
          pattern,
          `${dtype} pattern 0x${pattern.toString(16)} = ${value}`,
        );
      }
    });
  }

  it('rounds to nearest, ties to even', () => {
    assert.equal(roundTo(1 + 2 ** -8, 'bfloat16'), 1); // tie: 1.0 has the even mantissa
    assert.equal(roundTo(1 + 3 * 2 ** -8, 'bfloat16'), 1 + 2 ** -6); // tie: rounds up to even
    assert.equal(roundTo(1 + 2 ** -8 + 2 ** -20, 'bfloat16'), 1 + 2 ** -7); // just above the tie
    assert.equal(roundTo(1 + 2 ** -11, 'float16'), 1);
    assert.equal(roundTo(2049, 'float16'), 2048);
    assert.equal(roundTo(2051, 'float16'), 2052);
    assert.equal(roundTo(0.1, 'float8_e4m3fn'), 0.1015625);
    assert.equal(roundTo(2 ** -10, 'float8_e4m3fn'), 0); // half the smallest subnormal: tie to 0
    assert.equal(roundTo(3 * 2 ** -10, 'float8_e4m3fn'), 2 ** -8); // tie between 1 and 2 subnormal units → 2
    assert.equal(roundTo(-0, 'bfloat16'), -0);
  });

  it('does not double-round through float32', () => {
    // 1 + 2^-8 + 2^-30 rounds to 1 + 2^-8 in float32 (a bf16 tie), but is above the tie in float64.
    const x = 1 + 2 ** -8 + 2 ** -30;
    assert.equal(Math.fround(x), 1 + 2 ** -8);
    assert.equal(roundTo(x, 'bfloat16'), 1 + 2 ** -7);
  });

  it('overflows by each format rule', () => {
    assert.equal(roundTo(65519, 'float16'), 65504);
    assert.equal(roundTo(65520, 'float16'), Infinity); // tie with the odd max mantissa → inf
    assert.equal(roundTo(-1e6, 'float16'), -Infinity);
    assert.equal(roundTo(3.39e38, 'bfloat16'), 3.3895313892515355e38);
    assert.equal(roundTo(3.4e38, 'bfloat16'), Infinity);
    assert.equal(roundTo(61439, 'float8_e5m2'), 57344);
    assert.equal(roundTo(61440, 'float8_e5m2'), Infinity);
    assert.equal(roundTo(Infinity, 'float8_e5m2'), Infinity);
    // e4m3fn has no infinity: 464 is a tie that rounds to 448 (even), beyond it is NaN (ml_dtypes).
    assert.equal(roundTo(464, 'float8_e4m3fn'), 448);
    assert.ok(Number.isNaN(roundTo(465, 'float8_e4m3fn')));
    assert.ok(Number.isNaN(roundTo(Infinity, 'float8_e4m3fn')));
    assert.equal(encodeValue(-1000, 'float8_e4m3fn'), 0xff);
  });

  it('saturates on request (OCP saturating mode)', () => {
    assert.equal(roundTo(1e6, 'float8_e4m3fn', { saturate: true }), 448);
    assert.equal(roundTo(-Infinity, 'float8_e4m3fn', { saturate: true }), -448);
    assert.equal(roundTo(1e6, 'float8_e5m2', { saturate: true }), 57344);
    assert.equal(roundTo(Infinity, 'float16', { saturate: true }), 65504);
    assert.ok(Number.isNaN(roundTo(Number.NaN, 'float8_e4m3fn', { saturate: true })));
  });

  it('knows each maximum', () => {
    assert.equal(finiteMax('float8_e4m3fn'), 448);
    assert.equal(finiteMax('float8_e5m2'), 57344);
    assert.equal(finiteMax('float16'), 65504);
    assert.equal(decodeValue(0x7f7f, 'bfloat16'), finiteMax('bfloat16'));
  });

  it('float32 rounds like Math.fround and bfloat16 agrees with the generic path', () => {
    for (let i = 0; i < 2000; i++) {
      const x = (Math.sin(i * 12.9898) * 43758.5453) % 7;
      const f = Math.fround(x);
      assert.equal(roundTo(x, 'float32'), f);
      // the float32 fast path and the exact float64 path must agree on float32-exact inputs
      assert.equal(roundTo(f, 'bfloat16'), roundTo(f + 0, 'bfloat16'));
    }
  });

  it('rounder(dtype) gives roundTo(·, dtype) for every kind of value', () => {
    for (const dtype of [
      'float16',
      'bfloat16',
      'float8_e4m3fn',
      'float8_e5m2',
      'float32',
      'float64',
    ] as const) {
      const round = rounder(dtype);
      const values = [0, -0, Number.NaN, Infinity, -Infinity, Number.MIN_VALUE, -Number.MAX_VALUE, 1e300];
      // Every representable value, the ties halfway to its neighbours and a hair either side of them,
      // overflow past the largest value, subnormals of both float64 and the format.
      const patterns =
        dtype === 'float32' || dtype === 'float64' ? 0 : 1 << (dtype.startsWith('float8') ? 8 : 16);
      for (let pattern = 0; pattern < patterns; pattern += dtype.startsWith('float8') ? 1 : 7) {
        const a = decodeValue(pattern, dtype);
        const b = decodeValue(Math.min(pattern + 1, patterns - 1), dtype);
        const mid = (a + b) / 2;
        values.push(a, mid, mid * (1 + 2 ** -40), mid * (1 - 2 ** -40));
      }
      for (let i = 0; i < 20_000; i++) {
        const x = Math.sin(i * 12.9898) * 43758.5453;
        values.push(x, x * 1e-6, x * 1e-12, x * 1e4, -x * 2 ** -140);
      }
      for (const x of values) {
        const [got, want] = [round(x), roundTo(x, dtype)];
        assert.ok(Object.is(got, want), `${dtype}: rounder(${x}) = ${got}, roundTo gives ${want}`);
      }
    }
  });
});
