/**
 * Tensor: a shape, a dtype, a device and its storage. Row-major and contiguous; reshape shares storage.
 *
 * @example
 * const q = Tensor.fromArray([1, 2, 3, 4], [2, 2], 'bfloat16');
 * q.toFloat64Array(); // Float64Array [1, 2, 3, 4]
 */
import { AttnlabError, InvalidArgumentError } from '../errors.js';
import {
  allocRaw,
  assertDType,
  type DType,
  decodeArray,
  type EncodeOptions,
  encodeArray,
  isFloatDType,
  itemSize,
  type RawArray,
} from './dtype.js';
import { type Device, type DeviceBuffer, deviceAllocator, type Storage } from './storage.js';

/**
 * A safety net for device memory: a device tensor that is garbage-collected without `dispose()`
 * returns its buffer to the pool. Explicit `dispose()` is still the way to keep memory flat in a
 * tight loop, since the collector runs when it likes.
 */
const deviceFinalizer = new FinalizationRegistry<DeviceBuffer>((buffer) => buffer.release());

export function numel(shape: readonly number[]): number {
  let n = 1;
  for (const d of shape) n *= d;
  return n;
}

function checkShape(argument: string, shape: readonly number[]): void {
  if (!Array.isArray(shape) || shape.some((d) => !Number.isInteger(d) || d < 0)) {
    throw new InvalidArgumentError(argument, 'an array of non-negative integers', JSON.stringify(shape));
  }
}

export class Tensor {
  readonly shape: readonly number[];
  readonly dtype: DType;
  #storage: Storage;
  #disposed = false;

  private constructor(shape: readonly number[], dtype: DType, storage: Storage) {
    this.shape = Object.freeze([...shape]);
    this.dtype = dtype;
    this.#storage = storage;
  }

  /** A host tensor over raw storage values (bits for float16/bfloat16/fp8). The array is not copied. */
  static fromRaw(data: RawArray, shape: readonly number[], dtype: DType): Tensor {
    checkShape('shape', shape);
    assertDType('dtype', dtype);
    const expected = allocRaw(dtype, 0).constructor;
    if (data.constructor !== expected) {
      throw new InvalidArgumentError('data', `a ${expected.name} for dtype ${dtype}`, data.constructor.name);
    }
    if (data.length !== numel(shape)) {
      throw new InvalidArgumentError(
        'data',
        `${numel(shape)} elements for shape [${shape.join(', ')}]`,
        `${data.length} elements`,
      );
    }
    return new Tensor(shape, dtype, { kind: 'host', data });
  }

  /** A host tensor from numbers, each rounded to `dtype` (round-to-nearest-even). */
  static fromArray(
    values: ArrayLike<number>,
    shape: readonly number[],
    dtype: DType = 'float32',
    options: EncodeOptions = {},
  ): Tensor {
    checkShape('shape', shape);
    assertDType('dtype', dtype);
    if (values.length !== numel(shape)) {
      throw new InvalidArgumentError(
        'values',
        `${numel(shape)} values for shape [${shape.join(', ')}]`,
        `${values.length} values`,
      );
    }
    return new Tensor(shape, dtype, { kind: 'host', data: encodeArray(values, dtype, options) });
  }

  static zeros(shape: readonly number[], dtype: DType = 'float32'): Tensor {
    checkShape('shape', shape);
    return new Tensor(shape, dtype, { kind: 'host', data: allocRaw(dtype, numel(shape)) });
  }

  /** A device tensor over a buffer from the CUDA pool; the tensor owns the buffer from now on. */
  static fromDeviceBuffer(buffer: DeviceBuffer, shape: readonly number[], dtype: DType): Tensor {
    const needed = numel(shape) * itemSize(dtype);
    if (buffer.bytes < needed) {
      throw new InvalidArgumentError('buffer', `at least ${needed} bytes`, `${buffer.bytes} bytes`);
    }
    const tensor = new Tensor(shape, dtype, { kind: 'device', buffer });
    deviceFinalizer.register(tensor, buffer, tensor);
    return tensor;
  }

  get device(): Device {
    return this.#storage.kind === 'host' ? 'cpu' : 'cuda';
  }
  get rank(): number {
    return this.shape.length;
  }
  get size(): number {
    return numel(this.shape);
  }
  get byteLength(): number {
    return this.size * itemSize(this.dtype);
  }
  get disposed(): boolean {
    return this.#disposed;
  }

  /** The raw host storage (bits for narrow dtypes). Throws for device tensors. */
  get data(): RawArray {
    const storage = this.#live();
    if (storage.kind !== 'host') {
      throw new InvalidArgumentError('tensor', 'a cpu tensor (call toHost() first)', 'a cuda tensor');
    }
    return storage.data;
  }

  /** The device buffer. Throws for host tensors. */
  get buffer(): DeviceBuffer {
    const storage = this.#live();
    if (storage.kind !== 'device') {
      throw new InvalidArgumentError('tensor', "a cuda tensor (call to('cuda') first)", 'a cpu tensor');
    }
    return storage.buffer;
  }

  /** Values decoded to float64 (copied from the GPU first when needed). */
  toFloat64Array(): Float64Array {
    return decodeArray(this.toHost().data, this.dtype);
  }

  /** One element, decoded, by its multi-index. Host tensors only. */
  get(...index: number[]): number {
    if (index.length !== this.rank) {
      throw new InvalidArgumentError('index', `${this.rank} indices`, `${index.length}`);
    }
    let offset = 0;
    for (let d = 0; d < this.rank; d++) {
      const i = index[d];
      if (!Number.isInteger(i) || i < 0 || i >= this.shape[d]) {
        throw new InvalidArgumentError(`index[${d}]`, `an integer in [0, ${this.shape[d]})`, String(i));
      }
      offset = offset * this.shape[d] + i;
    }
    return decodeArray(this.data.subarray(offset, offset + 1) as RawArray, this.dtype)[0];
  }

  /** A tensor of the same storage with another shape of the same size. */
  reshape(shape: readonly number[]): Tensor {
    checkShape('shape', shape);
    if (numel(shape) !== this.size) {
      throw new InvalidArgumentError(
        'shape',
        `a shape of ${this.size} elements`,
        `[${shape.join(', ')}] (${numel(shape)})`,
      );
    }
    return new Tensor(shape, this.dtype, this.#live());
  }

  /** Converts to another dtype on the host, rounding to nearest even. */
  astype(dtype: DType, options: EncodeOptions = {}): Tensor {
    assertDType('dtype', dtype);
    if (dtype === this.dtype) return this;
    if (!isFloatDType(dtype) && dtype !== 'bool' && dtype !== 'int32') {
      throw new InvalidArgumentError('dtype', 'a known dtype', dtype);
    }
    return Tensor.fromArray(this.toFloat64Array(), this.shape, dtype, options);
  }

  /** A copy on `device`; the same tensor when it is already there. */
  to(device: Device): Tensor {
    if (device !== 'cpu' && device !== 'cuda') {
      throw new InvalidArgumentError('device', "'cpu' or 'cuda'", JSON.stringify(device));
    }
    const storage = this.#live();
    if (device === this.device) return this;
    if (device === 'cpu') return this.toHost();
    if (storage.kind !== 'host') throw new AttnlabError('unreachable: host storage expected');
    const bytes = new Uint8Array(storage.data.buffer, storage.data.byteOffset, storage.data.byteLength);
    return Tensor.fromDeviceBuffer(deviceAllocator().copyToDevice(bytes), this.shape, this.dtype);
  }

  /** A host copy (waits for the GPU); the same tensor when it is already on the host. */
  toHost(): Tensor {
    const storage = this.#live();
    if (storage.kind === 'host') return this;
    const data = allocRaw(this.dtype, this.size);
    deviceAllocator().copyToHost(
      storage.buffer,
      new Uint8Array(data.buffer, data.byteOffset, data.byteLength),
    );
    return new Tensor(this.shape, this.dtype, { kind: 'host', data });
  }

  /** Frees device memory now (back to attnlab's pool). Host tensors just become unusable. */
  dispose(): void {
    if (this.#disposed) return;
    this.#disposed = true;
    if (this.#storage.kind === 'device') {
      deviceFinalizer.unregister(this);
      this.#storage.buffer.release();
    }
  }

  toString(): string {
    return `Tensor(shape=[${this.shape.join(', ')}], dtype=${this.dtype}, device=${this.device})`;
  }

  #live(): Storage {
    // A reshape shares storage, so a buffer released through another view counts as disposed too.
    if (this.#disposed || (this.#storage.kind === 'device' && this.#storage.buffer.released)) {
      throw new InvalidArgumentError('tensor', 'a live tensor', 'a disposed tensor');
    }
    return this.#storage;
  }
}
