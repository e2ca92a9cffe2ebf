/**
 * The small vocabulary every public entry point checks its arguments with, so that each error names
 * the argument, what was expected and what came, with the type where the type is the problem:
 * `scale: expected a finite number, got the string '0.125'`.
 */
import { AttnlabError, InvalidArgumentError } from './errors.js';

/**
 * True for a revoked Proxy (`Proxy.revocable(…)` then `revoke()`): every operation on one — `Array.isArray`,
 * a property read, `instanceof` — throws V8's TypeError. `Array.isArray` runs no trap of a live Proxy, so the
 * test has no side effect on one.
 */
export function isRevokedProxy(value: unknown): boolean {
  if (value === null || (typeof value !== 'object' && typeof value !== 'function')) return false;
  try {
    Array.isArray(value);
    return false;
  } catch {
    return true;
  }
}

/** What a caller's value threw when it was read: `Error: boom`, said in one short line. */
function thrownText(error: unknown): string {
  try {
    const text = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
    return quote(text).slice(1, -1);
  } catch {
    return 'an unprintable value';
  }
}

/**
 * Runs `read` over a caller's value. Whatever the read throws — a getter or a Proxy trap that throws, a revoked
 * Proxy — becomes InvalidArgumentError naming `argument`, never V8's raw TypeError from deep inside; attnlab's
 * own errors pass through as they are.
 */
export function readCaller<T>(argument: string, read: () => T): T {
  try {
    return read();
  } catch (error) {
    throw readFailure(argument, error);
  }
}

/** What readCaller throws for `error` thrown by reading `argument`: attnlab's own errors as they are. */
function readFailure(argument: string, error: unknown): unknown {
  if (error instanceof AttnlabError) return error;
  return new InvalidArgumentError(
    argument,
    'a value that reads without throwing (no getter or Proxy trap that throws, no revoked Proxy)',
    `a value whose read threw ${thrownText(error)}`,
  );
}

/** The revoked-Proxy refusal every entry point gives, naming `argument`. */
export function refuseRevoked(argument: string, value: unknown, expected: string): void {
  if (isRevokedProxy(value)) throw new InvalidArgumentError(argument, expected, 'a revoked Proxy');
}

/**
 * What a value is, as an error message says it: `the string '0.125'`, `NaN`, `an array [1, 2]`. Never throws:
 * a value that throws when looked at (a revoked Proxy, a throwing getter or toString) is said as such.
 */
export function describeValue(value: unknown): string {
  if (isRevokedProxy(value)) return 'a revoked Proxy';
  try {
    return describeReadable(value);
  } catch (error) {
    return `a value that threw ${thrownText(error)} when read`;
  }
}

function describeReadable(value: unknown): string {
  if (value === undefined) return 'undefined';
  if (value === null) return 'null';
  switch (typeof value) {
    case 'string':
      return `the string ${quote(value)}`;
    case 'number':
      return String(value);
    case 'boolean':
      return `the boolean ${value}`;
    case 'bigint':
      return `the bigint ${value}n`;
    case 'symbol':
      return `the symbol ${String(value.description)}`;
    case 'function':
      return `a function${value.name ? ` ${value.name}` : ''}`;
  }
  if (Array.isArray(value)) return `an array ${short(value)}`;
  const boxed = boxedPrimitive(value);
  if (boxed !== undefined) return boxed;
  if (ArrayBuffer.isView(value)) {
    const name = value.constructor.name;
    return `a ${name}${'length' in value ? ` of ${(value as { length: number }).length}` : ''}`;
  }
  const name = (value as object).constructor?.name;
  // Tensors and other classes describe themselves (Tensor's toString names shape, dtype and device).
  if (name && name !== 'Object' && typeof (value as object).toString === 'function') {
    const text = String(value);
    return text.startsWith('[object') ? `a ${name}` : text;
  }
  // Symbol keys are not in JSON: `{ [Symbol.toPrimitive]: … }` said as "an object {}" hid what it is.
  const symbols = Object.getOwnPropertySymbols(value).map((symbol) => symbol.description ?? 'a symbol');
  return `an object ${short(value)}${symbols.length > 0 ? ` (with ${symbols.slice(0, 3).join(', ')})` : ''}`;
}

/**
 * `new Number(0.5)` and its kin, said as what they are: read through toString they read "0.5", the same as the
 * number a check refuses them for being.
 */
function boxedPrimitive(value: object): string | undefined {
  for (const [Type, name] of [
    [Number, 'Number'],
    [String, 'String'],
    [Boolean, 'Boolean'],
  ] as const) {
    try {
      const inner = (Type.prototype.valueOf as (this: unknown) => unknown).call(value);
      return `a ${name} object (new ${name}(${typeof inner === 'string' ? quote(inner) : String(inner)}), not a primitive ${name.toLowerCase()})`;
    } catch {
      // not this kind of box
    }
  }
  return undefined;
}

function quote(text: string): string {
  const clipped = text.length > 40 ? `${text.slice(0, 37)}...` : text;
  // JSON escapes control characters, so a name read from a file cannot move the terminal's cursor.
  return `'${JSON.stringify(clipped).slice(1, -1)}'`;
}

function short(value: unknown): string {
  let text: string;
  try {
    text = JSON.stringify(value, (_k, v) => (typeof v === 'bigint' ? `${v}n` : v)) ?? String(value);
  } catch {
    text = '(unprintable)';
  }
  return text.length > 60 ? `${text.slice(0, 57)}...` : text;
}

/** The deepest nesting a snapshot copies: options nest 2 deep (a block table's rows); a cycle stops here. */
const SNAPSHOT_DEPTH = 8;
/** Entries a snapshot copies from one list: 2^27 (a block table of B=64 × 2M blocks) is past any real input. */
export const SNAPSHOT_MAX_ENTRIES = 2 ** 27;
/** The snapshots made here, so a value handed on between entry points is not copied a second time. */
const snapshots = new WeakSet<object>();
const typedArrayTag = Object.getOwnPropertyDescriptor(
  Object.getPrototypeOf(Int8Array.prototype),
  Symbol.toStringTag,
)!.get as (this: unknown) => string | undefined;

/**
 * What the caller passed, read exactly once into plain values that nothing outside attnlab can change:
 * a plain object (or a Proxy of one) becomes a frozen object holding its own enumerable keys only, its
 * prototype an empty one without Object.prototype behind it (SNAPSHOT_PROTOTYPE: nothing inherited), each
 * read once (an accessor runs once); an array
 * becomes a frozen array read index by index once (holes as undefined); a typed array becomes a copy of
 * the same type. Class instances (Tensors), functions and primitives are kept as they are. Every check and
 * every use after this reads the copy, so a getter, a Proxy or a callback that changes the caller's value
 * between the check and the use changes nothing.
 */
export function snapshot(argument: string, value: unknown): unknown {
  return copyValue(argument, value, 0);
}

/**
 * `kept` (true but for a call's own top-level copy that no other entry point is handed: its options
 * object, a tensor's shape) adds the copy to `snapshots`: a WeakSet's add costs ~1 µs, four times the copy
 * of a few fields, and a copy handed on unremembered is only copied once more.
 */
function copyValue(argument: string, value: unknown, depth: number, kept = true): unknown {
  if (value === null || typeof value !== 'object') return value;
  if (isRevokedProxy(value)) {
    throw new InvalidArgumentError(argument, 'a value that can be read', 'a revoked Proxy');
  }
  try {
    return copyReadable(argument, value, depth, kept);
  } catch (error) {
    throw readFailure(argument, error);
  }
}

/**
 * The prototype of a plain object's snapshot: an empty object without a chain to Object.prototype, so an
 * option missing from the copy reads undefined whatever Object.prototype holds, as with Object.create(null).
 * But Object.create(null) makes a dictionary-mode object, whose every property read is a hash lookup
 * (~100 ns: validateAttention's ~15 option reads were 2.1 of its 2.5 µs on the build machine), where an
 * object made by a constructor keeps V8's fast properties (0.35 µs for the whole validation).
 */
const SNAPSHOT_PROTOTYPE: object = Object.freeze(Object.create(null));
function SnapshotObject(): void {}
SnapshotObject.prototype = SNAPSHOT_PROTOTYPE;
const Snapshot = SnapshotObject as unknown as new () => Record<string, unknown>;

function copyReadable(argument: string, value: object, depth: number, kept: boolean): unknown {
  if (snapshots.has(value)) return value;
  if (ArrayBuffer.isView(value)) {
    const tag = typedArrayTag.call(value);
    if (tag === undefined) return value; // a DataView: no elements to copy
    const Ctor = globalThis[tag as 'Int32Array'] as Int32ArrayConstructor;
    return new Ctor(value as Int32Array);
  }
  if (depth >= SNAPSHOT_DEPTH) {
    throw new InvalidArgumentError(
      argument,
      `values nested at most ${SNAPSHOT_DEPTH} deep`,
      'a deeper (or circular) value',
    );
  }
  if (Array.isArray(value)) {
    const length: unknown = value.length;
    if (typeof length !== 'number' || !Number.isSafeInteger(length) || length > SNAPSHOT_MAX_ENTRIES) {
      throw new InvalidArgumentError(
        argument,
        `an array of at most ${SNAPSHOT_MAX_ENTRIES} entries`,
        `an array of ${String(length)}`,
      );
    }
    const copy = new Array<unknown>(length);
    // Each entry read once, as readCaller would (its name is made only where a read throws or an entry
    // is an object to copy: a shape's or a lengths list's numbers cost no string and no closure each).
    for (let i = 0; i < length; i++) {
      let item: unknown;
      try {
        item = (value as unknown[])[i];
      } catch (error) {
        throw readFailure(`${argument}[${i}]`, error);
      }
      copy[i] =
        item === null || typeof item !== 'object' ? item : copyValue(`${argument}[${i}]`, item, depth + 1);
    }
    return kept ? remember(Object.freeze(copy)) : Object.freeze(copy);
  }
  const proto = Object.getPrototypeOf(value);
  if (proto !== Object.prototype && proto !== null) return value;
  const copy = new Snapshot();
  for (const key of Object.keys(value)) {
    let item: unknown;
    try {
      item = (value as Record<string, unknown>)[key];
    } catch (error) {
      throw readFailure(`${argument}.${key}`, error);
    }
    copy[key] =
      item === null || typeof item !== 'object' ? item : copyValue(`${argument}.${key}`, item, depth + 1);
  }
  return kept ? remember(Object.freeze(copy)) : Object.freeze(copy);
}

function remember<T extends object>(value: T): T {
  snapshots.add(value);
  return value;
}

/**
 * A list argument (ids, a shape) as a frozen copy read once, or an error naming `argument`; `kept`: false
 * where the copy stays with its caller (copyValue says why).
 */
export function snapshotList(
  argument: string,
  value: unknown,
  expected: string,
  kept = true,
): readonly unknown[] {
  if (isRevokedProxy(value) || !Array.isArray(value))
    throw new InvalidArgumentError(argument, expected, describeValue(value));
  return copyValue(argument, value, 0, kept) as readonly unknown[];
}

/**
 * Options given as an object (or left out), returned as their snapshot (see `snapshot`): the only value
 * the caller may read from then on. Anything else is an error naming `argument`.
 */
export function checkOptionsObject<T extends object>(argument: string, value: unknown, expected: string): T {
  if (value === undefined) return NO_OPTIONS as T;
  // A plain object only: a Map, a class instance or an array has no option keys of its own (a Map's entries
  // are not keys), so every option in it would be ignored unsaid.
  refuseRevoked(argument, value, expected);
  const proto =
    value !== null && typeof value === 'object'
      ? readCaller(argument, () => Object.getPrototypeOf(value))
      : undefined;
  // A snapshot handed on (SNAPSHOT_PROTOTYPE) is already a plain copy: copyReadable keeps it as it is.
  if (proto !== Object.prototype && proto !== null && proto !== SNAPSHOT_PROTOTYPE) {
    throw new InvalidArgumentError(argument, expected, describeValue(value));
  }
  // The call's own copy: not remembered (copyValue); the values inside it are.
  return copyValue(argument, value, 0, false) as T;
}

/** What options left out read as: one frozen empty object for every call. */
const NO_OPTIONS: object = remember(Object.freeze(new Snapshot()));

/**
 * Rejects keys outside `known`, listing the valid ones and suggesting the closest: `aliases` maps
 * names a user brings from elsewhere (TE's snake_case, JAX's and PyTorch's spellings) to ours.
 */
export function checkKeys(
  argument: string,
  value: object,
  known: readonly string[],
  aliases: Readonly<Record<string, string>> = {},
): void {
  for (const key of Object.keys(value)) {
    if (known.includes(key)) continue;
    const suggestion = suggest(key, known, aliases);
    throw new InvalidArgumentError(
      argument,
      `only ${known.join(', ')}`,
      `unknown option ${quote(key)}${suggestion ? ` (did you mean ${suggestion}?)` : ''}`,
    );
  }
}

/**
 * The known name closest to `name`: an alias, the same letters ignoring case, `_` and `-`, or a few
 * edits away (`maxEdits`, by default 2 or a quarter of the name's length).
 */
export function suggest(
  name: string,
  known: readonly string[],
  aliases: Readonly<Record<string, string>> = {},
  maxEdits = Math.max(2, Math.floor(name.length / 4)),
): string | undefined {
  if (Object.hasOwn(aliases, name)) return aliases[name];
  const squash = (s: string) => s.replace(/[_-]/g, '').toLowerCase();
  const same = known.find((k) => squash(k) === squash(name));
  if (same) return same;
  let best: string | undefined;
  let bestDistance = maxEdits + 1;
  for (const k of known) {
    const d = editDistance(squash(name), squash(k));
    if (d < bestDistance) {
      best = k;
      bestDistance = d;
    }
  }
  return best;
}

function editDistance(a: string, b: string): number {
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const row = [i];
    for (let j = 1; j <= b.length; j++) {
      row[j] = Math.min(previous[j] + 1, row[j - 1] + 1, previous[j - 1] + (a[i - 1] === b[j - 1] ? 0 : 1));
    }
    previous = row;
  }
  return previous[b.length];
}

/** undefined → `fallback`; a boolean as it is; anything else (including 'false' and 0) is an error. */
export function checkBoolean(argument: string, value: unknown, fallback: boolean): boolean {
  if (value === undefined) return fallback;
  if (typeof value !== 'boolean') throw new InvalidArgumentError(argument, 'a boolean', describeValue(value));
  return value;
}

/** undefined → `fallback`; a finite number as it is. */
export function checkFinite(argument: string, value: unknown, fallback: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== 'number' || !Number.isFinite(value)) {
    throw new InvalidArgumentError(argument, 'a finite number', describeValue(value));
  }
  return value;
}

/** float32's largest finite value: the precision every backend but the float64 reference takes `scale` in. */
export const FLOAT32_MAX = 3.4028234663852886e38;

/**
 * undefined → `fallback`; a finite number with |scale| ≤ FLOAT32_MAX. JAX casts `scale` to the logits' dtype
 * (`logits *= jnp.array(scale, dtype=logits.dtype)`) and PyTorch's fused kernels take it as a C float; past
 * float32's range both hold it as ±inf, every score becomes ±inf or NaN and the output is all NaN whatever
 * the data, without a word. That outcome is known before any work, so it is refused here. A finite scale whose
 * products overflow only for some data (1e38 times a score above 3.4) is the data's, as in JAX and PyTorch.
 */
export function checkScale(argument: string, value: unknown, fallback: number): number {
  const scale = checkFinite(argument, value, fallback);
  if (Math.abs(scale) > FLOAT32_MAX) {
    throw new InvalidArgumentError(
      argument,
      `a finite number with |${argument}| ≤ 3.4028e38 (float32's largest: past it the kernels hold ±inf and every output is NaN)`,
      describeValue(value),
    );
  }
  return scale;
}

/** An integer in [min, max]; `expected` overrides the wording of what was expected. */
export function checkInteger(
  argument: string,
  value: unknown,
  min: number,
  max: number,
  expected?: string,
): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    throw new InvalidArgumentError(
      argument,
      expected ?? `an integer in [${min}, ${max}]`,
      describeValue(value),
    );
  }
  return value;
}

/** One of a few string values, with a suggestion for a near miss ('cuDNN' → 'cudnn'). */
export function checkChoice<T extends string>(argument: string, value: unknown, choices: readonly T[]): T {
  if (typeof value === 'string' && (choices as readonly string[]).includes(value)) return value as T;
  // Values are short ('E4M3', 'cpu'): only a spelling of the same word is suggested, not a near one.
  const hint = typeof value === 'string' ? suggest(value, choices, {}, value.length >= 6 ? 1 : 0) : undefined;
  throw new InvalidArgumentError(
    argument,
    `one of ${choices.map((c) => `'${c}'`).join(', ')}`,
    `${describeValue(value)}${hint ? ` (did you mean '${hint}'?)` : ''}`,
  );
}
