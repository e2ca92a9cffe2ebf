/**
 * A modifier read at other positions than the call's own: b, q and kv replaced by lookups in int32
 * tables (`_globalB[b]`, `_globalQ[q]`, `_globalKV[kv]`). contextParallelAttention runs each block of the
 * ring as a call over shard rows; with these tables a modifier written for global positions (documents,
 * ALiBi distances, prefix lengths) sees them. The tables are captures, so the generated source is the same
 * for every block and rank: one compile serves the whole ring.
 */
import type { Tensor } from '../tensor/tensor.js';
import type { Expr } from './expression.js';
import { fromTree, type Modifier, type ModifierCapture } from './modifiers.js';

export interface PositionTables {
  /** int32 (nb): the global batch of each local one. */
  readonly b?: Tensor;
  /** int32 (rows): the global query position of each local row. */
  readonly q?: Tensor;
  /** int32 (rows): the global key position of each local key. */
  readonly kv?: Tensor;
}

const NAMES = { b: '_globalB', q: '_globalQ', kv: '_globalKV' } as const;

export function atGlobalPositions<Kind extends 'scoreMod' | 'maskMod'>(
  m: Modifier<Kind>,
  tables: PositionTables,
): Modifier<Kind> {
  const captures: ModifierCapture[] = [...m.captures];
  const slot: Partial<Record<keyof typeof NAMES, number>> = {};
  for (const letter of ['b', 'q', 'kv'] as const) {
    const tensor = tables[letter];
    if (tensor) slot[letter] = captures.push({ name: NAMES[letter], tensor, learned: false }) - 1;
  }
  const rewrite = (e: Expr): Expr => {
    switch (e.kind) {
      case 'variable': {
        const at = e.name === 'score' || e.name === 'h' ? undefined : slot[e.name];
        return at === undefined ? e : { kind: 'read', capture: at, indices: [e], type: 'int' };
      }
      case 'read':
        return { ...e, indices: e.indices.map(rewrite) };
      case 'unary':
        return { ...e, arg: rewrite(e.arg) };
      case 'binary':
        return { ...e, left: rewrite(e.left), right: rewrite(e.right) };
      case 'call':
        return { ...e, args: e.args.map(rewrite) };
      case 'select':
        return {
          ...e,
          test: rewrite(e.test),
          whenTrue: rewrite(e.whenTrue),
          whenFalse: rewrite(e.whenFalse),
        };
      default:
        return e;
    }
  };
  return fromTree(m.kind, m.name, m.expression, rewrite(m.tree), captures);
}
