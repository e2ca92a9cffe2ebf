/**
 * Values a tensor is made from are read once, and what was read is what is checked and stored; caller memory a
 * tensor keeps is a genuine typed array over a buffer that cannot shrink and regrow under it.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { attention } from '../../../src/api/attention.js';
import { InvalidArgumentError } from '../../../src/errors.js';
import { randomNormal } from '../../../src/tensor/random.js';
import { Tensor } from '../../../src/tensor/tensor.js';

/** An array whose entry `index` answers `first` to its first read and `later` to every read after. */
function changing(values: unknown[], index: number, first: unknown, later: unknown): unknown[] {
  let reads = 0;
  return Object.defineProperty([...values], index, { get: () => (reads++ === 0 ? first : later) });
}

describe('Tensor.fromArray reads each value once', () => {
  it("a getter's second value is never stored: what was checked is what is kept", () => {
    const values = changing([1, 2, 3], 1, 2, 'x');
    const t = Tensor.fromArray(values as number[], [3], 'float32');
    assert.deepEqual([...t.toFloat64Array()], [1, 2, 3]);
  });
  it('a getter that answers a valid value first and an invalid one later, for every dtype', () => {
    for (const dtype of ['float64', 'float32', 'bfloat16', 'float16', 'float8_e4m3fn', 'int32'] as const) {
      const values = changing([0, 0], 0, 1, Number.NaN);
      assert.deepEqual([...Tensor.fromArray(values as number[], [2], dtype).toFloat64Array()], [1, 0], dtype);
    }
  });
  it('each element getter runs exactly once, the length once', () => {
    let elementReads = 0;
    let lengthReads = 0;
    const target = [1, 2, 3, 4];
    const values = new Proxy(target, {
      get(t, key, receiver) {
        if (key === 'length') lengthReads++;
        else if (typeof key === 'string' && /^\d+$/.test(key)) elementReads++;
        return Reflect.get(t, key, receiver);
      },
    });
    Tensor.fromArray(values, [4]);
    assert.equal(elementReads, 4);
    assert.equal(lengthReads, 1);
  });
  it('an int32 value checked in range is the one stored (a later out-of-range answer is not)', () => {
    const values = changing([5], 0, 7, 2 ** 40);
    assert.equal(Tensor.fromArray(values as number[], [1], 'int32').get(0), 7);
  });
  it('a count that does not fit the shape is refused before anything is copied (a 2^32 − 1 sparse array)', () => {
    const t0 = Date.now();
    assert.throws(
      () => Tensor.fromArray(new Array(2 ** 32 - 1), [4]),
      (e) =>
        e instanceof InvalidArgumentError &&
        /expected 4 values for shape \[4\], got 4294967295 values/.test(e.message),
    );
    assert.ok(Date.now() - t0 < 1000, `${Date.now() - t0} ms`);
  });
  it("a typed array's elements are read from its memory, not through an own iterator or length", () => {
    const typed = new Float32Array([1, 2, 3]);
    Object.defineProperty(typed, Symbol.iterator, {
      value: function* () {
        yield 9;
      },
    });
    Object.defineProperty(typed, 'length', { value: 1 });
    assert.deepEqual([...Tensor.fromArray(typed, [3]).toFloat64Array()], [1, 2, 3]);
  });
  it('a detached typed array reads as empty: refused for a non-empty shape, an empty tensor for [0]', () => {
    const data = new Float32Array(4);
    structuredClone(data.buffer, { transfer: [data.buffer] });
    assert.equal(Tensor.fromArray(data, [0]).size, 0);
    assert.throws(
      () => Tensor.fromArray(data, [4]),
      /values: expected 4 values for shape \[4\], got 0 values/,
    );
  });
  it('a length that is not a count is refused by name', () => {
    const values = new Proxy([1], { get: (t, k) => (k === 'length' ? Number.NaN : Reflect.get(t, k)) });
    assert.throws(
      () => Tensor.fromArray(values, [1]),
      (e) => e instanceof InvalidArgumentError && e.argument === 'values.length',
    );
  });
});

describe('Tensor.fromRaw takes memory that cannot change shape under it', () => {
  const Resizable = ArrayBuffer as unknown as new (
    bytes: number,
    options: { maxByteLength: number },
  ) => ArrayBuffer & { resize(bytes: number): void };

  it('a view of a resizable ArrayBuffer is refused: shrunk and regrown, it reads as zeros', () => {
    const buffer = new Resizable(4 * 64, { maxByteLength: 4 * 128 });
    new Float32Array(buffer).fill(1);
    assert.throws(
      () => Tensor.fromRaw(new Float32Array(buffer, 0, 64), [1, 4, 2, 8], 'float32'),
      (e) =>
        e instanceof InvalidArgumentError && e.argument === 'data' && /resizable ArrayBuffer/.test(e.message),
    );
  });
  it('a fixed-length buffer keeps working; a subclass or a shadowed length is refused', () => {
    const q = randomNormal([1, 4, 2, 8], { seed: 1 });
    const t = Tensor.fromRaw(new Float32Array(q.data as Float32Array), [1, 4, 2, 8], 'float32');
    assert.deepEqual(
      [...attention(t, t, t).output.toFloat64Array()],
      [...attention(q, q, q).output.toFloat64Array()],
    );
    class Sub extends Float32Array {}
    assert.throws(() => Tensor.fromRaw(new Sub(4), [4], 'float32'), InvalidArgumentError);
    const shadowed = Object.defineProperty(new Float32Array(4), 'length', { value: 4 });
    assert.throws(
      () => Tensor.fromRaw(shadowed, [4], 'float32'),
      (e) => e instanceof InvalidArgumentError && /own 'length' property/.test(e.message),
    );
  });
  it("a property shadowed after construction is refused at the tensor's next use", () => {
    const data = new Float32Array(64);
    const t = Tensor.fromRaw(data, [1, 4, 2, 8], 'float32');
    Object.defineProperty(data, 'length', { value: 0 });
    assert.throws(
      () => attention(t, t, t),
      (e) => e instanceof InvalidArgumentError && e.argument === 'query' && /own 'length'/.test(e.message),
    );
  });
});
