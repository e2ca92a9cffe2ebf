/**
 * The scoreMod, maskMod and blockMask options of one call, checked and compiled at the one validation
 * point (api/validate.ts), so every backend receives them as CompiledModifiers and a matching BlockMask.
 */

import { describeValue } from '../arguments.js';
import { InvalidArgumentError } from '../errors.js';
import type { Device } from '../tensor/storage.js';
import { isBlockMask } from './block-mask.js';
import { compileModifiers, type ModifierSizes } from './compile.js';
import { builtinWindow } from './library.js';
import { isModifier, type MaskMod, maskMod, type ScoreMod, scoreMod } from './modifiers.js';
import type { BlockMask, CompiledModifiers } from './types.js';

export interface ModifierOptions {
  readonly scoreMod?: unknown;
  readonly maskMod?: unknown;
  readonly blockMask?: unknown;
}

export function asModifier<K extends 'scoreMod' | 'maskMod'>(
  kind: K,
  value: unknown,
): (K extends 'scoreMod' ? ScoreMod : MaskMod) | undefined {
  if (value === undefined) return undefined;
  type Out = K extends 'scoreMod' ? ScoreMod : MaskMod;
  if (typeof value === 'string') return (kind === 'scoreMod' ? scoreMod(value) : maskMod(value)) as Out;
  if (isModifier(value, kind)) return value as Out;
  const other = kind === 'scoreMod' ? 'maskMod' : 'scoreMod';
  throw new InvalidArgumentError(
    kind,
    `a ${kind}(...) modifier or an expression string`,
    isModifier(value, other) ? `a ${other} (pass it as ${other})` : describeValue(value),
  );
}

export interface CheckedModifiers {
  modifiers?: CompiledModifiers;
  blockMask?: BlockMask;
  /** A ready-made causal()/slidingWindow() mask, to run as the built-in window (top-left) instead. */
  builtin?: { readonly left: number; readonly right: number };
}

/**
 * The problem's `modifiers` and `blockMask` (absent when not asked for). With `alignment` 'top_left', a
 * maskMod that is exactly causal() or slidingWindow(l, r) comes back as `builtin` instead (its block mask
 * checked, then dropped): the built-in masks mean the same there, and every backend runs them.
 */
export function checkModifiers(
  options: ModifierOptions,
  sizes: ModifierSizes,
  device: Device,
  alignment: 'top_left' | 'bottom_right' = 'bottom_right',
): CheckedModifiers {
  const checked = checkAll(options, sizes, device);
  const mask = asModifier('maskMod', options.maskMod);
  const builtin = mask && alignment === 'top_left' ? builtinWindow(mask) : undefined;
  if (!builtin) return checked;
  const score = asModifier('scoreMod', options.scoreMod);
  return { builtin, ...(score && { modifiers: compileModifiers(score, undefined, sizes, device) }) };
}

function checkAll(
  options: ModifierOptions,
  sizes: ModifierSizes,
  device: Device,
): { modifiers?: CompiledModifiers; blockMask?: BlockMask } {
  const score = asModifier('scoreMod', options.scoreMod);
  const mask = asModifier('maskMod', options.maskMod);
  const out: { modifiers?: CompiledModifiers; blockMask?: BlockMask } = {};
  if (score || mask) out.modifiers = compileModifiers(score, mask, sizes, device);
  if (options.blockMask !== undefined) {
    const blockMask = options.blockMask;
    if (!isBlockMask(blockMask))
      throw new InvalidArgumentError(
        'blockMask',
        'a BlockMask made by createBlockMask',
        describeValue(blockMask),
      );
    if (!out.modifiers?.hasMaskMod)
      throw new InvalidArgumentError(
        'blockMask',
        'a maskMod beside it (the partial blocks evaluate it)',
        'no maskMod',
      );
    const made = `B=${blockMask.B} N=${blockMask.N} T=${blockMask.T} S=${blockMask.S}`;
    const call = `B=${sizes.B} N=${sizes.N} T=${sizes.T} S=${sizes.S}`;
    if (made !== call)
      throw new InvalidArgumentError('blockMask', `one made for this call's ${call}`, `one made for ${made}`);
    if (blockMask.maskKey !== out.modifiers.maskKey)
      throw new InvalidArgumentError(
        'blockMask',
        "one made from this call's maskMod",
        'one made from another maskMod',
      );
    if (blockMask.kinds.disposed)
      throw new InvalidArgumentError('blockMask', 'a live BlockMask', 'a disposed one');
    if (blockMask.device !== device)
      throw new InvalidArgumentError('blockMask.device', `${device} (the query's)`, blockMask.device);
    out.blockMask = blockMask;
  }
  return out;
}
