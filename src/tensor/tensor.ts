/**
 * Tensor: a shape, a dtype, a device and its storage. Row-major and contiguous; reshape shares storage.
 *
 * @example
 * const q = Tensor.fromArray([1, 2, 3, 4], [2, 2], 'bfloat16');
 * q.toFloat64Array(); // Float64Array [1, 2, 3, 4]
 */
import { checkChoice, describeValue, isRevokedProxy, readCaller } from '../arguments.js';
import { InvalidArgumentError } from '../errors.js';
import {
  allocFloat64,
  allocHost,
  checkEncodeOptions,
  checkShape,
  checkValues,
  numel,
  shapeText,
} from './checks.js';
import {
  allocRaw,
  assertDType,
  type DType,
  decodeArray,
  type EncodeOptions,
  encodeArray,
  itemSize,
  type RawArray,
} from './dtype.js';
import { bufferDetached, heldElements, hostViewProblem, shadowedName } from './host-view.js';
import { adoptStorage, isReleased, releaseStorage } from './lifetime.js';
import {
  DEVICES,
  type Device,
  type DeviceBuffer,
  deviceAllocator,
  type Storage,
  type WebgpuBuffer,
  webgpuAllocator,
} from './storage.js';

export { numel };

/** The storage behind a tensor, for the memory scope (tidy/keep); not part of the public surface. */
export let storageOf: (tensor: Tensor) => Storage;

/**
 * True for a Tensor itself. A Proxy of a Tensor (Vue's `reactive`, MobX) or an object made from
 * Tensor.prototype passes `instanceof` but holds no storage: its private field is out of reach, and
 * every use of it would be V8's TypeError from deep inside.
 */
export let isTensor: (value: unknown) => value is Tensor;

/**
 * What became of a host tensor's memory when it no longer holds its elements, or null while it does. `fromRaw`
 * does not copy, so the caller's buffer can be transferred to a worker (postMessage), detached
 * (structuredClone with transfer, ArrayBuffer.transfer) or shrunk (a resizable ArrayBuffer) under the tensor:
 * its view then reads 0 elements or fewer than the shape's, and a kernel over it would read zeros or past it.
 */
let lostMemory: (tensor: Tensor) => string | null;

export class Tensor {
  readonly shape: readonly number[];
  readonly dtype: DType;
  #storage: Storage;

  static {
    storageOf = (tensor) => tensor.#storage;
    isTensor = (value): value is Tensor => typeof value === 'object' && value !== null && #storage in value;
    lostMemory = (tensor) => {
      const storage = tensor.#storage;
      if (storage.kind !== 'host') return null;
      const about = `a Tensor ${shapeText(tensor.shape)} ${tensor.dtype} whose caller-owned`;
      const shadowed = shadowedName(storage.data);
      if (shadowed !== undefined) return `${about} typed array was given an own '${shadowed}' property`;
      const have = heldElements(storage.data);
      const want = numel(tensor.shape);
      if (have === want) return null;
      const what = bufferDetached(storage.data)
        ? 'was detached or transferred (postMessage, structuredClone, ArrayBuffer.transfer)'
        : 'no longer holds the tensor';
      return `${about} ArrayBuffer ${what}: its view holds ${have} of ${want} elements`;
    };
  }

  /** `view`: over another tensor's storage (reshape), which stays that storage's owner. */
  private constructor(shape: readonly number[], dtype: DType, storage: Storage, view = false) {
    this.shape = Object.freeze([...shape]);
    this.dtype = dtype;
    this.#storage = storage;
    if (!view) adoptStorage(storage);
  }

  /**
   * A host tensor over raw storage values (bits for float16/bfloat16/fp8): a genuine typed array of the dtype's
   * storage type over a fixed-length ArrayBuffer (a resizable one is refused: shrunk and regrown it reads as
   * zeros, which no later check can tell). The array is not copied: the tensor reads the caller's memory, and
   * every use checks it is still there (a buffer transferred or detached under it is refused with
   * InvalidArgumentError naming the tensor, never read as zeros).
   */
  static fromRaw(data: RawArray, shape: readonly number[], dtype: DType): Tensor {
    shape = checkShape('shape', shape);
    assertDType('dtype', dtype);
    const expected = allocRaw(dtype, 0).constructor as { readonly name: string; readonly prototype: object };
    const problem = hostViewProblem(data, expected);
    if (problem !== null) {
      const got = problem === 'type' ? describeValue(data) : problem;
      throw new InvalidArgumentError('data', `a ${expected.name} for dtype ${dtype}`, got);
    }
    const length = heldElements(data);
    if (length !== numel(shape)) {
      throw new InvalidArgumentError(
        'data',
        `${numel(shape)} elements for shape [${shape.join(', ')}]`,
        `${length} elements`,
      );
    }
    return new Tensor(shape, dtype, { kind: 'host', data });
  }

  /**
   * A host tensor from numbers, each rounded to `dtype` (round-to-nearest-even). int32 truncates
   * toward zero and refuses NaN, ±Infinity and values outside [-2^31, 2^31 − 1].
   */
  static fromArray(
    values: ArrayLike<number>,
    shape: readonly number[],
    dtype: DType = 'float32',
    options: EncodeOptions = {},
  ): Tensor {
    shape = checkShape('shape', shape);
    assertDType('dtype', dtype);
    // The values as read once (their count against the shape's first): the copy is what is checked and stored.
    const read = checkValues('values', values, dtype, shape);
    const encode = checkEncodeOptions('options', options);
    return Tensor.#encoded(read, shape, dtype, encode);
  }

  static #encoded(values: ArrayLike<number>, shape: readonly number[], dtype: DType, options: EncodeOptions) {
    const data = allocHost(dtype, shape);
    return new Tensor(shape, dtype, { kind: 'host', data: encodeArray(values, dtype, options, data) });
  }

  /** A host tensor of zeros (false for bool). */
  static zeros(shape: readonly number[], dtype: DType = 'float32'): Tensor {
    shape = checkShape('shape', shape);
    assertDType('dtype', dtype);
    return new Tensor(shape, dtype, { kind: 'host', data: allocHost(dtype, shape) });
  }

  /** A device tensor over a buffer from the CUDA pool; the tensor owns the buffer from now on. */
  static fromDeviceBuffer(buffer: DeviceBuffer, shape: readonly number[], dtype: DType): Tensor {
    shape = checkShape('shape', shape);
    assertDType('dtype', dtype);
    const needed = numel(shape) * itemSize(dtype);
    // The whole interface, not only ptr: a buffer without release() failed at dispose() as V8's TypeError,
    // and a NaN size passed the size check below (NaN < needed is false).
    if (
      buffer === null ||
      typeof buffer !== 'object' ||
      typeof buffer.ptr !== 'bigint' ||
      typeof buffer.release !== 'function' ||
      typeof buffer.released !== 'boolean' ||
      !Number.isSafeInteger(buffer.bytes)
    ) {
      throw new InvalidArgumentError('buffer', 'a DeviceBuffer from the pool', describeValue(buffer));
    }
    if (buffer.released) throw new InvalidArgumentError('buffer', 'a live DeviceBuffer', 'a released one');
    if (buffer.bytes < needed) {
      throw new InvalidArgumentError('buffer', `at least ${needed} bytes`, `${buffer.bytes} bytes`);
    }
    return new Tensor(shape, dtype, { kind: 'device', buffer });
  }

  get device(): Device {
    const { kind } = this.#storage;
    return kind === 'host' ? 'cpu' : kind === 'device' ? 'cuda' : 'webgpu';
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
  /** True once this tensor, or another view of its storage, was disposed (or its tidy scope ended). */
  get disposed(): boolean {
    return isReleased(this.#storage);
  }

  /** The raw host storage (bits for narrow dtypes). Throws for device tensors. */
  get data(): RawArray {
    const storage = this.#live();
    if (storage.kind !== 'host') {
      const how = storage.kind === 'webgpu' ? 'await toHostAsync() first' : 'call toHost() first';
      throw new InvalidArgumentError('tensor', `a cpu tensor (${how})`, `a ${this.device} tensor`);
    }
    return storage.data;
  }

  /** The device buffer. Throws for host tensors. */
  get buffer(): DeviceBuffer {
    const storage = this.#live();
    if (storage.kind !== 'device') {
      throw new InvalidArgumentError(
        'tensor',
        "a cuda tensor (call to('cuda') first)",
        `a ${this.device} tensor`,
      );
    }
    return storage.buffer;
  }

  /** The WebGPU buffer. Throws for tensors on another device. */
  get webgpuBuffer(): WebgpuBuffer {
    const storage = this.#live();
    if (storage.kind !== 'webgpu') {
      throw new InvalidArgumentError(
        'tensor',
        "a webgpu tensor (call to('webgpu') first)",
        `a ${this.device} tensor`,
      );
    }
    return storage.buffer;
  }

  /** A tensor that owns `buffer` from now on (the WebGPU backend's outputs). */
  static fromWebgpuBuffer(buffer: WebgpuBuffer, shape: readonly number[], dtype: DType): Tensor {
    checkShape('shape', shape);
    assertDType('dtype', dtype);
    const needed = numel(shape) * itemSize(dtype);
    if (buffer === null || typeof buffer !== 'object' || typeof buffer.release !== 'function') {
      throw new InvalidArgumentError('buffer', 'a WebgpuBuffer', describeValue(buffer));
    }
    if (buffer.released) throw new InvalidArgumentError('buffer', 'a live WebgpuBuffer', 'a released one');
    if (!(buffer.bytes >= needed)) {
      throw new InvalidArgumentError('buffer', `at least ${needed} bytes`, `${buffer.bytes} bytes`);
    }
    return new Tensor(shape, dtype, { kind: 'webgpu', buffer });
  }

  /** Values decoded to float64, read back from any device (the one way for a webgpu tensor). */
  async toFloat64ArrayAsync(): Promise<Float64Array> {
    const host = await this.toHostAsync();
    return decodeArray(host.data, this.dtype, allocFloat64(this.shape));
  }

  /** Values decoded to float64 (copied from the GPU first when needed). */
  toFloat64Array(): Float64Array {
    // Through allocFloat64: 8 bytes an element can outgrow the host where the tensor's own 2 did not.
    return decodeArray(this.toHost().data, this.dtype, allocFloat64(this.shape));
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
        throw new InvalidArgumentError(
          `index[${d}]`,
          `an integer in [0, ${this.shape[d]})`,
          describeValue(i),
        );
      }
      offset = offset * this.shape[d] + i;
    }
    return decodeArray(this.data.subarray(offset, offset + 1) as RawArray, this.dtype)[0];
  }

  /** A tensor of the same storage with another shape of the same size. */
  reshape(shape: readonly number[]): Tensor {
    shape = checkShape('shape', shape);
    if (numel(shape) !== this.size) {
      throw new InvalidArgumentError(
        'shape',
        `a shape of ${this.size} elements (as ${shapeText(this.shape)})`,
        `${shapeText(shape)} (${numel(shape)})`,
      );
    }
    return new Tensor(shape, this.dtype, this.#live(), true);
  }

  /** Converts to another dtype on the host, rounding to nearest even. */
  astype(dtype: DType, options: EncodeOptions = {}): Tensor {
    assertDType('dtype', dtype);
    checkEncodeOptions('options', options);
    this.#live(); // the same tensor back is still a use: a disposed one is refused as in every other dtype
    if (dtype === this.dtype) return this;
    const values = this.toFloat64Array();
    // The element that cannot convert is named by its flat index in this tensor.
    checkValues('tensor', values, dtype);
    return Tensor.#encoded(values, this.shape, dtype, options);
  }

  /** A copy on `device`; the same tensor when it is already there. */
  to(device: Device): Tensor {
    checkChoice<Device>('device', device, DEVICES);
    const storage = this.#live();
    if (device === this.device) return this;
    if (device === 'cpu') return this.toHost();
    if (storage.kind !== 'host') {
      // cuda ↔ webgpu shares no memory: the bytes go through the host, which the caller does in two steps.
      throw new InvalidArgumentError(
        'device',
        `cpu (a ${this.device} tensor moves to ${device} through the host: .toHost…() first)`,
        device,
      );
    }
    const bytes = new Uint8Array(storage.data.buffer, storage.data.byteOffset, storage.data.byteLength);
    if (device === 'webgpu') {
      return Tensor.fromWebgpuBuffer(webgpuAllocator().copyToWebgpu(bytes), this.shape, this.dtype);
    }
    return Tensor.fromDeviceBuffer(deviceAllocator().copyToDevice(bytes), this.shape, this.dtype);
  }

  /**
   * A host copy on any device; the same tensor when it is already on the host. WebGPU reads back
   * only asynchronously (mapAsync), so this is the way to read a webgpu tensor.
   */
  async toHostAsync(): Promise<Tensor> {
    const storage = this.#live();
    if (storage.kind !== 'webgpu') return this.toHost();
    const data = allocHost(this.dtype, this.shape);
    await webgpuAllocator().copyFromWebgpu(
      storage.buffer,
      new Uint8Array(data.buffer, data.byteOffset, data.byteLength),
    );
    return new Tensor(this.shape, this.dtype, { kind: 'host', data });
  }

  /** A host copy (waits for the GPU); the same tensor when it is already on the host. */
  toHost(): Tensor {
    const storage = this.#live();
    if (storage.kind === 'host') return this;
    if (storage.kind === 'webgpu') {
      throw new InvalidArgumentError(
        'tensor',
        'a cpu or cuda tensor (WebGPU reads back asynchronously: await toHostAsync() or toFloat64ArrayAsync())',
        'a webgpu tensor',
      );
    }
    const data = allocHost(this.dtype, this.shape);
    deviceAllocator().copyToHost(
      storage.buffer,
      new Uint8Array(data.buffer, data.byteOffset, data.byteLength),
    );
    return new Tensor(this.shape, this.dtype, { kind: 'host', data });
  }

  /**
   * Frees the storage now: device memory goes back to attnlab's pool, host memory to the collector.
   * Every view of the same storage (a reshape) becomes unusable with it. Idempotent.
   */
  dispose(): void {
    releaseStorage(this.#storage);
  }

  toString(): string {
    return `Tensor(shape=[${this.shape.join(', ')}], dtype=${this.dtype}, device=${this.device})`;
  }

  #live(): Storage {
    // A reshape shares storage, so a buffer released through another view counts as disposed too.
    if (isReleased(this.#storage)) {
      const what = `${shapeText(this.shape)} ${this.dtype} on ${this.device}`;
      throw new InvalidArgumentError('tensor', 'a live tensor', `a disposed tensor ${what}`);
    }
    const lost = lostMemory(this);
    if (lost !== null)
      throw new InvalidArgumentError('tensor', 'a tensor whose memory is still attached', lost);
    return this.#storage;
  }
}

/** `value` as a live Tensor, or InvalidArgumentError naming `argument`: the one check every API entry uses. */
export function checkTensor(argument: string, value: unknown): Tensor {
  if (!isTensor(value)) {
    // A revoked Proxy (or one whose getPrototypeOf trap throws) fails `instanceof` with V8's TypeError.
    const proxyOfTensor = !isRevokedProxy(value) && readCaller(argument, () => value instanceof Tensor);
    const got = proxyOfTensor
      ? 'a Proxy of a Tensor or an object made from Tensor.prototype (pass the Tensor itself)'
      : describeValue(value);
    throw new InvalidArgumentError(argument, 'a Tensor', got);
  }
  if (value.disposed) throw new InvalidArgumentError(argument, 'a live Tensor', 'a disposed Tensor');
  const lost = lostMemory(value);
  if (lost !== null)
    throw new InvalidArgumentError(argument, 'a Tensor whose memory is still attached', lost);
  return value;
}
