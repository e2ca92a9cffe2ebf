/**
 * What `Tensor.fromRaw` accepts as caller memory, read through the engine's own getters: a typed array's
 * `length` and `buffer` can be shadowed by an own property (`Object.defineProperty(view, 'length', …)`), a
 * subclass can override them, and a Proxy of a typed array is no typed array at all (`ArrayBuffer.isView` is
 * false for it). Every check here reads the view's internal slots, which nothing outside the engine can change.
 */
import type { RawArray } from './dtype.js';

const TYPED_ARRAY = Object.getPrototypeOf(Int8Array.prototype) as object;
const getter = (owner: object, key: PropertyKey) =>
  Object.getOwnPropertyDescriptor(owner, key)?.get as (this: unknown) => unknown;
const tagOf = getter(TYPED_ARRAY, Symbol.toStringTag);
const lengthOf = getter(TYPED_ARRAY, 'length');
const bufferOf = getter(TYPED_ARRAY, 'buffer');
/** ArrayBuffer.prototype.resizable (Node ≥ 20); absent in an engine without resizable buffers. */
const resizableOf = getter(ArrayBuffer.prototype, 'resizable') as ((this: unknown) => boolean) | undefined;
const detachedOf = getter(ArrayBuffer.prototype, 'detached') as ((this: unknown) => boolean) | undefined;
const byteLengthOf = getter(ArrayBuffer.prototype, 'byteLength');

/** The names attnlab's backends read on a host view (an own property by one of them would be read instead). */
const READ_NAMES = [
  'length',
  'buffer',
  'byteOffset',
  'byteLength',
  'subarray',
  'set',
  'constructor',
] as const;

/** The constructor's name of a genuine typed array (`'Float32Array'`), or undefined for anything else. */
export function typedArrayName(value: unknown): string | undefined {
  return ArrayBuffer.isView(value) ? (tagOf.call(value) as string | undefined) : undefined;
}

/**
 * Why `data` cannot be a host tensor's memory of type `Ctor`, or null when it can: a genuine `Ctor` (not a
 * subclass), no own property shadowing what the backends read, over a fixed-length ArrayBuffer. A resizable
 * ArrayBuffer is refused outright: shrunk and regrown between two uses, it holds as many elements as before,
 * all zeros, and no later check could tell (a SharedArrayBuffer only grows, so its fixed-length views keep
 * their elements, and it is accepted).
 */
export function hostViewProblem(
  data: unknown,
  Ctor: { readonly name: string; readonly prototype: object },
): string | null {
  if (typedArrayName(data) !== Ctor.name || Object.getPrototypeOf(data) !== Ctor.prototype) return 'type';
  const shadowed = READ_NAMES.find((name) => Object.hasOwn(data as object, name));
  if (shadowed)
    return `a ${Ctor.name} with an own '${shadowed}' property (it would be read in place of its own)`;
  const buffer = bufferOf.call(data);
  if (buffer instanceof ArrayBuffer && resizableOf?.call(buffer) === true) {
    return `a ${Ctor.name} over a resizable ArrayBuffer (shrunk and regrown, it would read as zeros)`;
  }
  return null;
}

const byteOffsetOf = getter(TYPED_ARRAY, 'byteOffset');
/** The number typed array constructors, as they are when this module loads (a later global replaced is not used). */
const CONSTRUCTORS: Readonly<
  Record<string, new (buffer: ArrayBufferLike, offset: number, length: number) => RawArray>
> = Object.fromEntries(
  [
    Int8Array,
    Uint8Array,
    Uint8ClampedArray,
    Int16Array,
    Uint16Array,
    Int32Array,
    Uint32Array,
    Float32Array,
    Float64Array,
  ].map((Ctor) => [
    Ctor.name,
    Ctor as unknown as new (buffer: ArrayBufferLike, offset: number, length: number) => RawArray,
  ]),
);

/**
 * The elements of number typed array `view` as a view that holds still while attnlab reads it twice (a check,
 * then an encode): a fresh view over the same memory, made from its internal slots (no own property, no
 * species constructor of the caller's), when that memory is the caller's alone; a copy when it is a
 * SharedArrayBuffer's, which another thread may write in between.
 */
export function stableView(view: RawArray): RawArray {
  const Ctor = CONSTRUCTORS[typedArrayName(view) ?? ''];
  // Empty (a detached view reads as empty): no buffer to view, and a detached one cannot be viewed at all.
  if (typedLength(view) === 0) return new Ctor(new ArrayBuffer(0), 0, 0);
  const buffer = bufferOf.call(view) as ArrayBufferLike;
  const fresh = new Ctor(buffer, byteOffsetOf.call(view) as number, typedLength(view));
  if (buffer instanceof ArrayBuffer) return fresh;
  const copy = new Ctor(new ArrayBuffer(fresh.byteLength), 0, fresh.length);
  copy.set(fresh);
  return copy;
}

/** A typed array's element count from its internal slot (an own `length` property cannot change it). */
export function typedLength(view: unknown): number {
  return lengthOf.call(view) as number;
}

/** Elements the view holds now (0 once its buffer was detached or transferred), read from its internal slot. */
export function heldElements(data: RawArray): number {
  return lengthOf.call(data) as number;
}

/** Whether the view's ArrayBuffer was detached or transferred (postMessage, structuredClone, transfer()). */
export function bufferDetached(data: RawArray): boolean {
  const buffer = bufferOf.call(data);
  if (!(buffer instanceof ArrayBuffer)) return false;
  return detachedOf ? detachedOf.call(buffer) : byteLengthOf.call(buffer) === 0;
}

/** The first name of READ_NAMES the view holds as an own property now, or undefined. */
export function shadowedName(data: RawArray): string | undefined {
  return READ_NAMES.find((name) => Object.hasOwn(data, name));
}
