import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { InvalidArgumentError } from '../../../src/errors.js';
import { Random, randomNormal, randomUniform } from '../../../src/tensor/random.js';
import { Tensor } from '../../../src/tensor/tensor.js';

describe('Tensor', () => {
  it('stores narrow dtypes as bits and decodes them', () => {
    const t = Tensor.fromArray([1, 0.1, -2.5, 1e6], [2, 2], 'bfloat16');
    assert.equal(t.data.constructor, Uint16Array);
    assert.deepEqual([...t.toFloat64Array()], [1, 0.10009765625, -2.5, 999424]);
    assert.equal(t.get(1, 0), -2.5);
    assert.equal(t.device, 'cpu');
  });

  it('reshapes over shared storage and converts dtypes', () => {
    const t = Tensor.fromArray([1, 2, 3, 4, 5, 6], [2, 3], 'float32');
    const r = t.reshape([3, 2]);
    assert.equal(r.data, t.data);
    assert.deepEqual([...t.astype('float8_e4m3fn').toFloat64Array()], [1, 2, 3, 4, 5, 6]);
    assert.throws(() => t.reshape([4, 2]), InvalidArgumentError);
  });

  it('rejects bad shapes, data and dtypes by name', () => {
    assert.throws(() => Tensor.fromArray([1, 2], [3]), /values: expected 3 values/);
    assert.throws(() => Tensor.zeros([2, -1]), /shape\[1\]: expected a non-negative integer, got -1/);
    assert.throws(() => Tensor.fromArray([1], [1], 'float128' as never), /dtype: expected one of/);
    assert.throws(() => Tensor.fromRaw(new Float32Array(2), [2], 'float16'), /data: expected a Uint16Array/);
    assert.throws(
      () => Tensor.zeros([1]).to('tpu' as never),
      /device: expected one of 'cpu', 'cuda', 'webgpu', got the string 'tpu'$/,
    );
  });

  it('stores booleans given for a bool tensor as themselves (false was stored as true)', () => {
    const mask = Tensor.fromArray([true, false, true, false] as never, [4], 'bool');
    assert.deepEqual([...(mask.data as Uint8Array)], [1, 0, 1, 0]);
    assert.deepEqual(
      [...Tensor.fromArray([0, -0, Number.NaN, 2], [4], 'bool').toFloat64Array()],
      [0, 0, 1, 1],
    );
  });

  it('cannot be used after dispose', () => {
    const t = Tensor.zeros([2]);
    t.dispose();
    assert.throws(() => t.toFloat64Array(), /expected a live tensor, got a disposed tensor/);
  });
});

describe('seeded random', () => {
  it('is deterministic and pinned to known values', () => {
    const a = new Random(42);
    const b = new Random(42);
    const first = [a.nextUint32(), a.nextUint32(), a.nextUint32()];
    assert.deepEqual(first, [b.nextUint32(), b.nextUint32(), b.nextUint32()]);
    // Pinned so that a change of generator (which would change every recorded input) is noticed.
    assert.deepEqual(first, PINNED_UINT32);
    assert.notDeepEqual(randomNormal([8], { seed: 1 }).data, randomNormal([8], { seed: 2 }).data);
  });

  it('draws normals with mean 0 and std 1, uniforms in range', () => {
    const x = randomNormal([20000], { seed: 7, dtype: 'float64' }).toFloat64Array();
    const mean = x.reduce((s, v) => s + v, 0) / x.length;
    const std = Math.sqrt(x.reduce((s, v) => s + (v - mean) ** 2, 0) / x.length);
    assert.ok(Math.abs(mean) < 0.03, `mean ${mean}`);
    assert.ok(Math.abs(std - 1) < 0.03, `std ${std}`);
    const u = randomUniform([1000], { seed: 3, low: -2, high: 5, dtype: 'float64' }).toFloat64Array();
    assert.ok(u.every((v) => v >= -2 && v < 5));
  });
});

const PINNED_UINT32 = [2837322924, 544945897, 479756282];
