/**
 * scoreMod and maskMod: attention variants as checked expression strings over the score, the indices
 * b (batch), h (query head), q (query position), kv (key position) and named captured tensors.
 *
 *   maskMod('docIds[b, q] == docIds[b, kv] && kv <= q', { docIds })     // packed documents, causal
 *   scoreMod('score + slopes[h] * (kv - q)', { slopes })                // ALiBi
 *
 * The expression is parsed and type-checked here, before anything is compiled; a bad one is an
 * InvalidArgumentError naming the modifier and the token.
 */

import { checkOptionsObject, describeValue, snapshotList } from '../arguments.js';
import { InvalidArgumentError } from '../errors.js';
import { checkTensor, type Tensor } from '../tensor/tensor.js';
import { MAX_CAPTURE_RANK, MAX_CAPTURES } from './cuda.js';
import { type CaptureShape, type Expr, isCaptureName, parseExpression } from './expression.js';

export interface ModifierCapture {
  readonly name: string;
  readonly tensor: Tensor;
  /** Its gradient is computed by the backward (a learned float32 tensor of a score modifier). */
  readonly learned: boolean;
}

/** The modifiers scoreMod, maskMod and the ready-made ones made: a copy or a Proxy of one is not one. */
const MADE = new WeakSet<object>();

/**
 * A checked modifier expression and its captures; make one with scoreMod or maskMod. A class instance, so
 * option snapshots keep it as it is (arguments.ts copies only plain objects).
 */
export class Modifier<Kind extends 'scoreMod' | 'maskMod'> {
  constructor(
    readonly kind: Kind,
    /** Its name in errors and debug lines (the ready-made modifier's name, else 'custom'). */
    readonly name: string,
    /** The expression as written. */
    readonly expression: string,
    /** The typed expression tree (internal: the code generator and the CPU evaluator read it). */
    readonly tree: Expr,
    readonly captures: readonly ModifierCapture[],
  ) {
    Object.freeze(this);
  }

  toString(): string {
    return `a ${this.kind} '${this.name}' (${this.expression})`;
  }
}

export type ScoreMod = Modifier<'scoreMod'>;
export type MaskMod = Modifier<'maskMod'>;

export interface ModifierOptions {
  /** The modifier's name in errors and debug lines; default 'custom'. */
  name?: string;
  /** Score modifiers: captured float32 tensors whose gradient attentionVjp returns (in dCaptures). */
  learn?: readonly string[];
}

const KINDS = ['int32', 'float32'];

function checkCaptures(what: string, capturesIn: unknown): { name: string; tensor: Tensor }[] {
  const captures = checkOptionsObject<Record<string, unknown>>(
    `${what} captures`,
    capturesIn,
    'an object of named int32/float32 tensors (or undefined)',
  );
  const out: { name: string; tensor: Tensor }[] = [];
  for (const name of Object.keys(captures)) {
    if (!isCaptureName(name)) {
      throw new InvalidArgumentError(
        `${what} captures`,
        'names that are identifiers other than b, h, q, kv, score, inf, true, false and the function names',
        `the name '${name}'`,
      );
    }
    const tensor = checkTensor(`${what} captures.${name}`, captures[name]);
    if (!KINDS.includes(tensor.dtype))
      throw new InvalidArgumentError(`${what} captures.${name}.dtype`, 'int32 or float32', tensor.dtype);
    if (tensor.rank < 1 || tensor.rank > MAX_CAPTURE_RANK) {
      throw new InvalidArgumentError(
        `${what} captures.${name}`,
        `rank 1 to ${MAX_CAPTURE_RANK} (one index per dimension)`,
        `rank ${tensor.rank} [${tensor.shape.join(', ')}]`,
      );
    }
    out.push({ name, tensor });
  }
  if (out.length > MAX_CAPTURES)
    throw new InvalidArgumentError(`${what} captures`, `at most ${MAX_CAPTURES} tensors`, `${out.length}`);
  return out;
}

function make<Kind extends 'scoreMod' | 'maskMod'>(
  kind: Kind,
  expression: unknown,
  capturesIn: unknown,
  optionsIn: unknown,
): Modifier<Kind> {
  const options = checkOptionsObject<ModifierOptions>(
    `${kind} options`,
    optionsIn,
    'an object { name?, learn? } (or undefined)',
  );
  const name = options.name === undefined ? 'custom' : options.name;
  if (typeof name !== 'string' || name === '')
    throw new InvalidArgumentError(`${kind} options.name`, 'a non-empty string', describeValue(name));
  const what = `${kind} '${name}'`;
  const captures = checkCaptures(what, capturesIn);
  const learn =
    options.learn === undefined
      ? []
      : snapshotList(`${what} learn`, options.learn, 'an array of captured float32 tensor names').map(String);
  for (const l of learn) {
    const c = captures.find((x) => x.name === l);
    if (kind === 'maskMod')
      throw new InvalidArgumentError(`${what} learn`, 'nothing (a mask has no gradient)', `'${l}'`);
    if (c?.tensor.dtype !== 'float32')
      throw new InvalidArgumentError(`${what} learn`, 'names of captured float32 tensors', `'${l}'`);
  }
  const shapes: CaptureShape[] = captures.map((c) => ({
    name: c.name,
    type: c.tensor.dtype === 'int32' ? 'int' : 'float',
    rank: c.tensor.rank,
  }));
  const tree = parseExpression(what, expression as string, shapes, kind === 'scoreMod');
  if (kind === 'maskMod' && tree.type !== 'bool')
    throw new InvalidArgumentError(
      what,
      'a boolean expression (true keeps the position)',
      `${tree.type === 'int' ? 'an' : 'a'} ${tree.type} expression '${expression}'`,
    );
  if (kind === 'scoreMod' && tree.type === 'bool')
    throw new InvalidArgumentError(
      what,
      'a number (the new score)',
      `a boolean expression '${expression}' (use maskMod)`,
    );
  const made = captures.map((c) => Object.freeze({ ...c, learned: learn.includes(c.name) }));
  return fromTree(kind, name, expression as string, tree, made);
}

/**
 * A score modifier: `score` (scale · q·k, plus the bias tensor's entry) → a new score, before masking
 * and softmax. Its gradient reaches the score, and the captures named in `learn`, by the chain rule.
 *
 * @example
 * const slopes = Tensor.fromArray([0.5, 0.25], [2], 'float32');
 * attention(q, k, v, { scoreMod: scoreMod('score + slopes[h] * (kv - q)', { slopes }) });
 */
export function scoreMod(
  expression: string,
  captures: Readonly<Record<string, Tensor>> = {},
  options: ModifierOptions = {},
): ScoreMod {
  return make('scoreMod', expression, captures, options);
}

/**
 * A mask modifier: a boolean expression of (b, h, q, kv) that keeps a position when true.
 *
 * @example
 * const docIds = Tensor.fromArray([[0, 0, 1, 1]], [1, 4], 'int32');
 * attention(q, k, v, { maskMod: maskMod('docIds[b, q] == docIds[b, kv] && kv <= q', { docIds }) });
 */
export function maskMod(
  expression: string,
  captures: Readonly<Record<string, Tensor>> = {},
  options: Pick<ModifierOptions, 'name'> = {},
): MaskMod {
  return make('maskMod', expression, captures, options);
}

export function isModifier(value: unknown, kind: 'scoreMod' | 'maskMod'): boolean {
  return (
    typeof value === 'object' &&
    value !== null &&
    MADE.has(value) &&
    (value as Modifier<typeof kind>).kind === kind
  );
}

/** Builds a modifier from an already-checked tree (combinators and ready-made modifiers). */
export function fromTree<Kind extends 'scoreMod' | 'maskMod'>(
  kind: Kind,
  name: string,
  expression: string,
  tree: Expr,
  captures: readonly ModifierCapture[],
): Modifier<Kind> {
  const made = new Modifier(kind, name, expression, tree, Object.freeze([...captures]));
  MADE.add(made);
  return made;
}

/** `m` over copies of its captured tensors made by `move` (e.g. to another device); the expression is unchanged. */
export function withCaptures<Kind extends 'scoreMod' | 'maskMod'>(
  m: Modifier<Kind>,
  move: (t: Tensor) => Tensor,
): Modifier<Kind> {
  return fromTree(
    m.kind,
    m.name,
    m.expression,
    m.tree,
    m.captures.map((c) => ({ ...c, tensor: move(c.tensor) })),
  );
}
