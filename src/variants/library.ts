/**
 * Ready-made modifiers for the common attention variants, and and/or/not to combine masks. Each is an
 * ordinary scoreMod or maskMod (the same checks, code generation and CPU evaluation), named after its
 * function in errors and debug lines.
 */

import { checkInteger, describeValue } from '../arguments.js';
import { InvalidArgumentError } from '../errors.js';
import { checkTensor, Tensor } from '../tensor/tensor.js';
import type { Expr } from './expression.js';
import {
  fromTree,
  isModifier,
  type MaskMod,
  type ModifierCapture,
  maskMod,
  type ScoreMod,
  scoreMod,
} from './modifiers.js';

const MAX_INT = 2 ** 31 - 1;

/**
 * The masks causal() and slidingWindow() made, with the built-in window each one is: validation runs them as
 * isCausal/localWindowSize (top-left alignment), so cuDNN's and the flash kernels' own masking (which skips
 * whole key blocks) takes them, and no expression is evaluated.
 */
const BUILTIN = new WeakMap<object, { readonly left: number; readonly right: number }>();

/** The built-in window a ready-made mask is ({ left: Infinity, right: 0 } for causal), or undefined. */
export function builtinWindow(m: MaskMod): { readonly left: number; readonly right: number } | undefined {
  return BUILTIN.get(m);
}

/** Keys at or before the query: kv ≤ q (top-left alignment; isCausal with 'bottom_right' shifts by S − T). */
export function causal(): MaskMod {
  const m = maskMod('kv <= q', {}, { name: 'causal' });
  BUILTIN.set(m, { left: Number.POSITIVE_INFINITY, right: 0 });
  return m;
}

/**
 * Query q sees keys q − left … q + right (inclusive): slidingWindow(w, 0) is causal local attention over
 * the w previous keys and the query's own.
 */
export function slidingWindow(left: number, right: number): MaskMod {
  const l = checkInteger('slidingWindow left', left, 0, MAX_INT, 'a non-negative integer');
  const r = checkInteger('slidingWindow right', right, 0, MAX_INT, 'a non-negative integer');
  const m = maskMod(`kv >= q - ${l} && kv <= q + ${r}`, {}, { name: 'slidingWindow' });
  BUILTIN.set(m, { left: l, right: r });
  return m;
}

/**
 * Packed documents: a query sees only keys of its own document. `docIds` is int32 (B, T) or (T): the
 * document of each position (self-attention, T = S). Combine with causal() for causal packed training.
 */
export function documentMask(docIds: Tensor): MaskMod {
  const ids = checkTensor('documentMask docIds', docIds);
  if (ids.dtype !== 'int32') throw new InvalidArgumentError('documentMask docIds.dtype', 'int32', ids.dtype);
  if (ids.rank !== 1 && ids.rank !== 2) {
    throw new InvalidArgumentError('documentMask docIds', 'rank 1 (T) or 2 (B, T)', `rank ${ids.rank}`);
  }
  const expression = ids.rank === 2 ? 'docIds[b, q] == docIds[b, kv]' : 'docIds[q] == docIds[kv]';
  return maskMod(expression, { docIds: ids }, { name: 'documentMask' });
}

/**
 * Prefix-LM: the first lengths[b] keys are visible to every query of batch b (bidirectional prefix),
 * the rest causally. `lengths` is int32 (B).
 */
export function prefixLm(lengths: Tensor): MaskMod {
  const t = checkTensor('prefixLm lengths', lengths);
  if (t.dtype !== 'int32') throw new InvalidArgumentError('prefixLm lengths.dtype', 'int32', t.dtype);
  if (t.rank !== 1) throw new InvalidArgumentError('prefixLm lengths', 'rank 1 (B)', `rank ${t.rank}`);
  return maskMod('kv < lengths[b] || kv <= q', { lengths: t }, { name: 'prefixLm' });
}

/** The usual ALiBi slopes for N heads: 2^(−8(h+1)/N), h = 0…N−1 (for N a power of two, as Press et al.). */
export function alibiSlopes(N: number): Tensor {
  const n = checkInteger('alibiSlopes N', N, 1, 65536, 'a positive integer');
  return Tensor.fromArray(
    Array.from({ length: n }, (_, h) => 2 ** ((-8 * (h + 1)) / n)),
    [n],
    'float32',
  );
}

/**
 * ALiBi: score + slopes[h] · (kv − q), a linear penalty on distance for keys before the query. `slopes`
 * is float32 (N), or a head count N for alibiSlopes(N).
 */
export function alibi(slopes: Tensor | number): ScoreMod {
  const t = typeof slopes === 'number' ? alibiSlopes(slopes) : checkTensor('alibi slopes', slopes);
  if (t.dtype !== 'float32') throw new InvalidArgumentError('alibi slopes.dtype', 'float32', t.dtype);
  if (t.rank !== 1) throw new InvalidArgumentError('alibi slopes', 'rank 1 (N)', `rank ${t.rank}`);
  return scoreMod('score + slopes[h] * (kv - q)', { slopes: t }, { name: 'alibi' });
}

/** Logit soft-capping (Gemma 2, Grok): c · tanh(score / c), scores bounded to (−c, c). */
export function softcap(c: number): ScoreMod {
  if (typeof c !== 'number' || !Number.isFinite(c) || c <= 0)
    throw new InvalidArgumentError('softcap c', 'a finite positive number', describeValue(c));
  const literal = Number.isInteger(c) ? `${c}.0` : String(c);
  return scoreMod(`${literal} * tanh(score / ${literal})`, {}, { name: 'softcap' });
}

/**
 * A learned relative-position bias (T5-style, clipped): score + table[h, clamp(kv − q, −D, D) + D], with
 * `table` float32 (N, 2D+1). Its gradient comes back from attentionVjp/attentionBackward as
 * dCaptures.table.
 */
export function relativeBias(table: Tensor): ScoreMod {
  const t = checkTensor('relativeBias table', table);
  if (t.dtype !== 'float32') throw new InvalidArgumentError('relativeBias table.dtype', 'float32', t.dtype);
  if (t.rank !== 2 || t.shape[1] % 2 !== 1) {
    throw new InvalidArgumentError(
      'relativeBias table',
      'rank 2 (N, 2D+1): one bias per head and clipped distance −D…D',
      `[${t.shape.join(', ')}]`,
    );
  }
  const D = (t.shape[1] - 1) / 2;
  return scoreMod(
    `score + table[h, min(max(kv - q, -${D}), ${D}) + ${D}]`,
    { table: t },
    {
      name: 'relativeBias',
      learn: ['table'],
    },
  );
}

/** Attention sinks (StreamingLLM): the first n keys; combine with or(), e.g. or(slidingWindow(w, 0), sinks(4)). */
export function sinks(n: number): MaskMod {
  const count = checkInteger('sinks n', n, 0, MAX_INT, 'a non-negative integer');
  return maskMod(`kv < ${count}`, {}, { name: 'sinks' });
}

function checkMasks(what: string, masks: readonly unknown[]): MaskMod[] {
  if (masks.length === 0) throw new InvalidArgumentError(what, 'at least one maskMod', 'none');
  masks.forEach((m, i) => {
    if (!isModifier(m, 'maskMod'))
      throw new InvalidArgumentError(`${what} argument ${i}`, 'a maskMod', describeValue(m));
  });
  return masks as MaskMod[];
}

/** `tree` with its capture indices renumbered through `slots`. */
function renumber(tree: Expr, slots: readonly number[]): Expr {
  if (tree.kind === 'read')
    return { ...tree, capture: slots[tree.capture], indices: tree.indices.map((i) => renumber(i, slots)) };
  switch (tree.kind) {
    case 'unary':
      return { ...tree, arg: renumber(tree.arg, slots) };
    case 'binary':
      return { ...tree, left: renumber(tree.left, slots), right: renumber(tree.right, slots) };
    case 'call':
      return { ...tree, args: tree.args.map((a) => renumber(a, slots)) };
    case 'select':
      return {
        ...tree,
        test: renumber(tree.test, slots),
        whenTrue: renumber(tree.whenTrue, slots),
        whenFalse: renumber(tree.whenFalse, slots),
      };
    default:
      return tree;
  }
}

function combine(op: '&&' | '||', what: string, masks: readonly unknown[]): MaskMod {
  const parts = checkMasks(what, masks);
  const captures: ModifierCapture[] = [];
  const trees = parts.map((m) => {
    const slots = m.captures.map((c) => {
      const same = captures.findIndex((d) => d.name === c.name);
      if (same < 0) return captures.push(c) - 1;
      if (captures[same].tensor !== c.tensor) {
        throw new InvalidArgumentError(
          what,
          `one tensor per capture name (two masks capture '${c.name}')`,
          'two different tensors',
        );
      }
      return same;
    });
    return renumber(m.tree, slots);
  });
  const tree = trees.reduce((left, right) => ({ kind: 'binary', op, left, right, type: 'bool' }));
  const expression = parts.map((m) => `(${m.expression})`).join(` ${op} `);
  const name = `${what}(${parts.map((m) => m.name).join(', ')})`;
  return fromTree('maskMod', name, expression, tree, captures);
}

/** Keeps a position where every mask keeps it. */
export function and(...masks: MaskMod[]): MaskMod {
  return combine('&&', 'and', masks);
}

/** Keeps a position where any mask keeps it. */
export function or(...masks: MaskMod[]): MaskMod {
  return combine('||', 'or', masks);
}

/** Keeps a position where the mask drops it. */
export function not(mask: MaskMod): MaskMod {
  const [m] = checkMasks('not', [mask]);
  return fromTree(
    'maskMod',
    `not(${m.name})`,
    `!(${m.expression})`,
    {
      kind: 'unary',
      op: '!',
      arg: m.tree,
      type: 'bool',
    },
    m.captures,
  );
}
