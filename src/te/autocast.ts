/**
 * FP8 autocast scoping, as TE's `te.autocast(enabled=True, recipe=...)` context manager.
 *
 * Two forms, both without a module-level variable that an unrelated caller could see:
 * - a callback, `autocast({ enabled, recipe }, () => attn.forward(q, k, v))`: the scope lives in an
 *   AsyncLocalStorage, so it follows the callback across awaits and two concurrent scopes (for
 *   example two requests in one server) never see each other's recipe;
 * - an explicit object, `const fp8 = autocast({ enabled, recipe })` then
 *   `attn.forward(q, k, v, { autocast: fp8 })`, for callers who would rather pass it by hand.
 * An explicit object on the call wins over an enclosing callback scope.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { checkBoolean, checkKeys, checkOptionsObject, describeValue } from '../arguments.js';
import { InvalidArgumentError } from '../errors.js';
import { DelayedScaling, type Fp8Recipe, isRecipe } from './recipe.js';

export interface AutocastOptions {
  /** Default true: `autocast({ recipe })` turns FP8 on. */
  enabled?: boolean;
  /** Default `new DelayedScaling()` (TE's default recipe: HYBRID, margin 0, 1024 history, 'max'). */
  recipe?: Fp8Recipe;
  /**
   * When the FP8 path cannot run (no sm_90 GPU, an unsupported head dim, mask or bias), run the
   * bf16 path instead of throwing UnsupportedError. Default false: asking for FP8 and silently not
   * getting it would make every FP8 number measured under this scope a bf16 number.
   */
  fallback?: boolean;
}

/** A resolved autocast scope: immutable, so sharing it between calls cannot leak state. */
export interface Fp8Autocast {
  readonly enabled: boolean;
  readonly recipe: Fp8Recipe;
  readonly fallback: boolean;
}

const scope = new AsyncLocalStorage<Fp8Autocast>();

function resolve(optionsIn: AutocastOptions): Fp8Autocast {
  const options = checkOptionsObject<AutocastOptions>(
    'autocast options',
    optionsIn,
    'an object { enabled?, recipe?, fallback? }',
  );
  checkKeys('autocast options', options, ['enabled', 'recipe', 'fallback'], { fp8_recipe: 'recipe' });
  const enabled = checkBoolean('enabled', options.enabled, true);
  const fallback = checkBoolean('fallback', options.fallback, false);
  const recipe = options.recipe ?? new DelayedScaling();
  if (!isRecipe(recipe)) {
    throw new InvalidArgumentError(
      'recipe',
      'a DelayedScaling or Float8CurrentScaling',
      describeValue(recipe),
    );
  }
  return Object.freeze({ enabled, recipe, fallback });
}

/**
 * Runs `body` with FP8 autocast in effect for every DotProductAttention call inside it (including
 * after awaits), and returns what `body` returns; or, without `body`, returns the scope as an object
 * to pass explicitly as `{ autocast }` on a call.
 *
 * @example
 * const recipe = new DelayedScaling({ fp8Format: 'HYBRID', amaxHistoryLen: 16 });
 * const out = autocast({ enabled: true, recipe }, () => attn.forward(q, k, v));
 */
export function autocast<R>(options: AutocastOptions, body: () => R): R;
export function autocast(options: AutocastOptions): Fp8Autocast;
export function autocast<R>(options: AutocastOptions, body?: () => R): R | Fp8Autocast {
  const resolved = resolve(options);
  if (body === undefined) return resolved;
  if (typeof body !== 'function') throw new InvalidArgumentError('body', 'a function', describeValue(body));
  return scope.run(resolved, body);
}

/** The autocast scope a call runs under: the explicit one if given, else the enclosing callback's. */
export function activeAutocast(explicit?: Fp8Autocast): Fp8Autocast | undefined {
  if (explicit !== undefined) {
    if (explicit === null || typeof explicit !== 'object' || !isRecipe(explicit.recipe)) {
      throw new InvalidArgumentError(
        'autocast',
        'an object returned by autocast({ ... })',
        describeValue(explicit),
      );
    }
    // A hand-made scope's flags are read as booleans too: { enabled: 'no' } was truthy and ran FP8.
    checkBoolean('autocast.enabled', explicit.enabled, true);
    checkBoolean('autocast.fallback', explicit.fallback, false);
    return explicit;
  }
  return scope.getStore();
}
