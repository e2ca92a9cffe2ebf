/**
 * FP8 recipes with TransformerEngine's names and rules, and the per-tensor state they update.
 *
 * TE's delayed scaling (transformer_engine.common.recipe.DelayedScaling): each FP8 tensor keeps an
 * amax history of `amaxHistoryLen` slots. Slot 0 receives the amax of the current step; after the
 * step the amax is taken from the history ('max' of all slots or 'most_recent' = slot 0), the scale
 * becomes (fp8Max / amax) / 2^margin, and the history rolls by one (slot 0 goes to the end, the
 * oldest value falls out, slot 0 is zeroed for the next step). A step therefore quantises with a
 * scale made from earlier steps only: no extra pass over the data, at the risk of clipping a new
 * outlier (quantisation saturates).
 */
import { checkChoice, checkKeys, checkOptionsObject, describeValue } from '../arguments.js';
import { InvalidArgumentError } from '../errors.js';
import { type Fp8DType, fp8Max } from '../tensor/dtype.js';

/** TE's `Format`: E4M3 everywhere, or HYBRID = E4M3 forward and E5M2 for gradients. */
export type Fp8Format = 'E4M3' | 'HYBRID';
export type AmaxComputeAlgo = 'max' | 'most_recent';

/** The FP8 dtype of forward tensors: e4m3 for both formats (HYBRID differs only in the backward pass). */
export function forwardDType(_format: Fp8Format): Fp8DType {
  return 'float8_e4m3fn';
}

/** The FP8 dtype of gradients (the FP8 backward's dO, dP, dQ, dK, dV): E5M2 under HYBRID, else E4M3. */
export function backwardDType(format: Fp8Format): Fp8DType {
  return format === 'HYBRID' ? 'float8_e5m2' : 'float8_e4m3fn';
}

function checkFormat(value: unknown): Fp8Format {
  return checkChoice<Fp8Format>('fp8Format', value, ['E4M3', 'HYBRID']);
}

/** TE's recipe argument names → ours. */
const TE_RECIPE_NAMES: Readonly<Record<string, string>> = {
  fp8_format: 'fp8Format',
  amax_history_len: 'amaxHistoryLen',
  amax_compute_algo: 'amaxComputeAlgo',
};

function recipeOptions<T extends object>(name: string, options: unknown, keys: readonly string[]): T {
  const o = checkOptionsObject<T>('options', options, `an object { ${keys.join(', ')} } (or undefined)`);
  checkKeys(`${name} options`, o, keys, TE_RECIPE_NAMES);
  return o;
}

export interface DelayedScalingOptions {
  /** Scales are divided by 2^margin, leaving headroom for growth; default 0. */
  margin?: number;
  /** Default 'HYBRID', as in TE. */
  fp8Format?: Fp8Format;
  /** Slots of amax history per tensor; default 1024, as in TE. */
  amaxHistoryLen?: number;
  /** How the amax used for the next scale is read from the history; default 'max'. */
  amaxComputeAlgo?: AmaxComputeAlgo;
}

/**
 * The largest margin: 2^128 is past float32's range, so from there every scale (fp8Max / amax / 2^margin, stored
 * as float32) would underflow for any amax a float32 tensor holds.
 */
const MAX_MARGIN = 127;
/**
 * The longest amax history: each FP8 tensor of a module keeps one (8 bytes an entry); TE's default is 1024 and
 * its recipes use 16–1024. 2^20 entries is 8 MiB a tensor, where 1e15 would fail at the first step, not here.
 */
const MAX_AMAX_HISTORY = 2 ** 20;

/** TE's DelayedScaling: per-tensor scales from an amax history of earlier steps. */
export class DelayedScaling {
  readonly kind = 'delayed';
  readonly margin: number;
  readonly fp8Format: Fp8Format;
  readonly amaxHistoryLen: number;
  readonly amaxComputeAlgo: AmaxComputeAlgo;

  constructor(options: DelayedScalingOptions = {}) {
    const o = recipeOptions<DelayedScalingOptions>('DelayedScaling', options, [
      'margin',
      'fp8Format',
      'amaxHistoryLen',
      'amaxComputeAlgo',
    ]);
    const { margin = 0, fp8Format = 'HYBRID', amaxHistoryLen = 1024, amaxComputeAlgo = 'max' } = o;
    if (typeof margin !== 'number' || !Number.isInteger(margin) || margin < 0 || margin > MAX_MARGIN) {
      throw new InvalidArgumentError('margin', `an integer in [0, ${MAX_MARGIN}]`, describeValue(margin));
    }
    if (
      typeof amaxHistoryLen !== 'number' ||
      !Number.isInteger(amaxHistoryLen) ||
      amaxHistoryLen < 1 ||
      amaxHistoryLen > MAX_AMAX_HISTORY
    ) {
      throw new InvalidArgumentError(
        'amaxHistoryLen',
        `an integer in [1, ${MAX_AMAX_HISTORY}]`,
        describeValue(amaxHistoryLen),
      );
    }
    this.margin = margin;
    this.fp8Format = checkFormat(fp8Format);
    this.amaxHistoryLen = amaxHistoryLen;
    this.amaxComputeAlgo = checkChoice<AmaxComputeAlgo>('amaxComputeAlgo', amaxComputeAlgo, [
      'max',
      'most_recent',
    ]);
  }
}

export interface Float8CurrentScalingOptions {
  fp8Format?: Fp8Format;
}

/**
 * TE's Float8CurrentScaling: each tensor is scaled by its own amax in this step (fp8Max / amax), at
 * the cost of a reduction pass before quantising. No history is kept.
 */
export class Float8CurrentScaling {
  readonly kind = 'current';
  readonly fp8Format: Fp8Format;
  constructor(options: Float8CurrentScalingOptions = {}) {
    const o = recipeOptions<Float8CurrentScalingOptions>('Float8CurrentScaling', options, ['fp8Format']);
    this.fp8Format = checkFormat(o.fp8Format ?? 'HYBRID');
  }
}

export type Fp8Recipe = DelayedScaling | Float8CurrentScaling;

export function isRecipe(value: unknown): value is Fp8Recipe {
  return value instanceof DelayedScaling || value instanceof Float8CurrentScaling;
}

/**
 * TE's scale rule: (fp8Max / amax) / 2^margin, rounded to float32 as TE stores it. A zero or
 * non-finite amax (nothing seen yet, or an overflow) keeps the previous scale.
 */
export function computeScale(amax: number, max: number, margin: number, previous: number): number {
  if (!(amax > 0) || !Number.isFinite(amax)) return previous;
  const scale = Math.fround(max / amax / 2 ** margin);
  // fp8Max / a denormal-small amax overflows float32; TE would store inf and poison the tensor. A large
  // amax with a large margin underflows to 0, which would quantise everything to zero and leave no inverse.
  return Number.isFinite(scale) && scale > 0 ? scale : previous;
}

/** The amax a history yields: its maximum, or slot 0 (the step just finished) for 'most_recent'. */
export function amaxFromHistory(history: Float64Array, algo: AmaxComputeAlgo): number {
  if (algo === 'most_recent') return history[0];
  let amax = 0;
  for (const a of history) if (a > amax) amax = a;
  return amax;
}

/** Rolls a history by one towards the front, as torch.roll(h, -1) / jnp.roll(h, -1), and zeroes slot 0. */
export function rollHistory(history: Float64Array): void {
  if (history.length > 1) {
    const first = history[0];
    history.copyWithin(0, 1);
    history[history.length - 1] = first;
  }
  history[0] = 0;
}

/** One FP8 tensor's state between steps: TE's amax_history, scale and scale_inv for that tensor. */
export class Fp8TensorMeta {
  readonly amaxHistory: Float64Array;
  /** The scale the next step quantises with; 1 until an amax has been seen. */
  scale = 1;

  constructor(historyLength: number) {
    this.amaxHistory = new Float64Array(historyLength);
  }

  get scaleInv(): number {
    return 1 / this.scale;
  }

  /**
   * Ends a delayed-scaling step: records `amax` in slot 0, derives the next scale from the history,
   * then rolls the history.
   */
  recordDelayed(amax: number, recipe: DelayedScaling, dtype: Fp8DType): void {
    this.amaxHistory[0] = amax;
    const fromHistory = amaxFromHistory(this.amaxHistory, recipe.amaxComputeAlgo);
    this.scale = computeScale(fromHistory, fp8Max(dtype), recipe.margin, this.scale);
    rollHistory(this.amaxHistory);
  }
}
