/**
 * tidy(fn) and keep(t): a memory scope for loops, as in TensorFlow.js.
 *
 * Every tensor whose storage is created while `fn` runs is freed when `fn` returns, except the
 * tensors `fn` returns (found in arrays, Maps, Sets and objects, however deep) and those passed to
 * keep(). Scopes nest: what an inner scope returns belongs to the enclosing one. Views matter: a
 * reshape shares its storage, so returning a view keeps the storage it looks at, and disposing a
 * view made inside the scope of a tensor made outside it is never done — the outer tensor is not
 * the scope's to free.
 */
import { describeValue, isRevokedProxy, readCaller } from '../arguments.js';
import { InvalidArgumentError } from '../errors.js';
import { closeScope, keepStorage, openScope } from './lifetime.js';
import type { Storage } from './storage.js';
import { isTensor, storageOf, Tensor } from './tensor.js';

/**
 * Runs `fn` and frees every tensor it created except what it returns (and what it passed to
 * `keep`). Device memory goes back to attnlab's pool at once, so a loop of `tidy` calls stays flat
 * without a single `dispose()`. If `fn` throws, everything it created is freed and the error goes on.
 *
 * @example
 * for (let step = 0; step < 100_000; step++) {
 *   const lse = tidy(() => attention(q, k, v, { returnLogSumExp: true }).logSumExp!.toHost());
 * } // memoryStats() is where it started, plus the last `lse`s nobody disposed
 */
export function tidy<R>(fn: () => R): R {
  if (typeof fn !== 'function' || isRevokedProxy(fn))
    throw new InvalidArgumentError('fn', 'a function', describeValue(fn));
  openScope();
  // The scope closes whatever happens, reading the result included: a result whose walk throws (a revoked
  // Proxy, a Proxy whose ownKeys trap throws) left it open, and every tensor made after it, inside no
  // tidy, was held by that scope for the rest of the process, out of the GC net's reach.
  let survivors: ReadonlySet<Storage> = new Set();
  try {
    const result = fn();
    if (isRevokedProxy(result)) {
      throw new InvalidArgumentError('fn', 'a result tidy can walk for its tensors', 'a revoked Proxy');
    }
    if (readCaller('fn', () => isThenable(result))) {
      throw new InvalidArgumentError(
        'fn',
        'a synchronous function (tidy cannot follow tensors across an await)',
        'a function that returned a Promise',
      );
    }
    // A result that throws as it is walked (a revoked Proxy, a trap that throws) is refused by name, its
    // scope closed below all the same.
    survivors = readCaller('fn', () => storagesIn(result));
    return result;
  } finally {
    closeScope(survivors);
  }
}

/**
 * Takes `tensor` out of every enclosing tidy scope: it lives until `dispose()` (or, as a last resort,
 * until the garbage collector finds it unreachable). Returns the tensor.
 */
export function keep<T extends Tensor>(tensor: T): T {
  if (!isTensor(tensor)) throw new InvalidArgumentError('tensor', 'a Tensor', notTensor(tensor));
  keepStorage(storageOf(tensor));
  return tensor;
}

function notTensor(value: unknown): string {
  if (isRevokedProxy(value)) return 'a revoked Proxy';
  return readCaller('tensor', () => value instanceof Tensor)
    ? 'a Proxy of a Tensor (pass the Tensor itself)'
    : describeValue(value);
}

function isThenable(value: unknown): boolean {
  return (
    value !== null &&
    (typeof value === 'object' || typeof value === 'function') &&
    typeof (value as { then?: unknown }).then === 'function'
  );
}

/**
 * The storages of every tensor reachable from `value` through data properties (getters are not
 * called: a lazy field such as the FP8 report's scales would wait for the GPU), array items and
 * Map/Set entries.
 */
function storagesIn(value: unknown): Set<Storage> {
  const found = new Set<Storage>();
  const seen = new Set<object>();
  const stack: unknown[] = [value];
  while (stack.length > 0) {
    const item = stack.pop();
    if (item === null || typeof item !== 'object' || seen.has(item)) continue;
    seen.add(item);
    if (isRevokedProxy(item)) {
      throw new InvalidArgumentError('fn', 'a result tidy can walk for its tensors', 'a revoked Proxy in it');
    }
    if (isTensor(item)) {
      found.add(storageOf(item));
    } else if (item instanceof Tensor) {
      // A Proxy of a Tensor: its storage cannot be reached, so tidy could neither keep nor free it.
      throw new InvalidArgumentError('fn', 'a result whose tensors are Tensors themselves', notTensor(item));
    } else if (Array.isArray(item) || item instanceof Set) {
      for (const element of item) if (typeof element === 'object') stack.push(element);
    } else if (item instanceof Map) {
      for (const [k, v] of item) stack.push(k, v);
    } else if (!ArrayBuffer.isView(item) && !(item instanceof ArrayBuffer)) {
      for (const descriptor of Object.values(Object.getOwnPropertyDescriptors(item))) {
        if ('value' in descriptor) stack.push(descriptor.value);
      }
    }
  }
  return found;
}
