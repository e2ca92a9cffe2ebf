/**
 * The modifier expression language: a checked expression string, parsed and typed before anything is
 * compiled, so a bad expression is an InvalidArgumentError naming the modifier and the token.
 *
 * Grammar (C precedence, lowest first):
 *   expr    := or ('?' expr ':' expr)?
 *   or      := and ('||' and)*          and := equal ('&&' equal)*
 *   equal   := rel (('==' | '!=') rel)*   rel := add (('<' | '<=' | '>' | '>=') add)*
 *   add     := mul (('+' | '-') mul)*     mul := unary (('*' | '/' | '%') unary)*
 *   unary   := ('-' | '!') unary | primary
 *   primary := number | 'inf' | 'true' | 'false' | variable | capture '[' expr (',' expr)* ']' | fn '(' expr (',' expr)* ')' | '(' expr ')'
 * Variables: `b`, `h`, `q`, `kv` (int) and, in a score modifier, `score` (float). Types are int, float and
 * bool; int op float promotes to float; `/` of two ints truncates toward zero as in C (0 when dividing by 0).
 */

import { describeValue } from '../arguments.js';
import { InvalidArgumentError } from '../errors.js';

export type ValueType = 'int' | 'float' | 'bool';

/** The functions an expression may call: argument count and result type rule. */
export const FUNCTIONS = {
  abs: 1,
  min: 2,
  max: 2,
  exp: 1,
  log: 1,
  sqrt: 1,
  tanh: 1,
  floor: 1,
  ceil: 1,
  int: 1,
  float: 1,
} as const;
export type FunctionName = keyof typeof FUNCTIONS;

export type BinaryOp = '+' | '-' | '*' | '/' | '%' | '==' | '!=' | '<' | '<=' | '>' | '>=' | '&&' | '||';
export type IndexVariable = 'b' | 'h' | 'q' | 'kv';

export type Expr =
  | { readonly kind: 'number'; readonly value: number; readonly type: ValueType }
  | { readonly kind: 'variable'; readonly name: IndexVariable | 'score'; readonly type: 'int' | 'float' }
  | {
      readonly kind: 'read';
      /** Index into the modifier's capture list. */
      readonly capture: number;
      readonly indices: readonly Expr[];
      readonly type: 'int' | 'float';
    }
  | { readonly kind: 'unary'; readonly op: '-' | '!'; readonly arg: Expr; readonly type: ValueType }
  | {
      readonly kind: 'binary';
      readonly op: BinaryOp;
      readonly left: Expr;
      readonly right: Expr;
      readonly type: ValueType;
    }
  | {
      readonly kind: 'call';
      readonly fn: FunctionName;
      readonly args: readonly Expr[];
      readonly type: ValueType;
    }
  | {
      readonly kind: 'select';
      readonly test: Expr;
      readonly whenTrue: Expr;
      readonly whenFalse: Expr;
      readonly type: ValueType;
    };

/** The direct sub-expressions of `e`. */
export function children(e: Expr): readonly Expr[] {
  switch (e.kind) {
    case 'read':
      return e.indices;
    case 'unary':
      return [e.arg];
    case 'binary':
      return [e.left, e.right];
    case 'call':
      return e.args;
    case 'select':
      return [e.test, e.whenTrue, e.whenFalse];
    default:
      return [];
  }
}

/** What the parser knows of a captured tensor: its name, element type and rank (the index count). */
export interface CaptureShape {
  readonly name: string;
  readonly type: 'int' | 'float';
  readonly rank: number;
}

interface Token {
  readonly text: string;
  readonly kind: 'number' | 'name' | 'op' | 'end';
  readonly column: number;
}

const OPERATORS = [
  '==',
  '!=',
  '<=',
  '>=',
  '&&',
  '||',
  '<',
  '>',
  '+',
  '-',
  '*',
  '/',
  '%',
  '!',
  '?',
  ':',
  '(',
  ')',
  '[',
  ']',
  ',',
];
const RESERVED = new Set(['b', 'h', 'q', 'kv', 'score', 'inf', 'true', 'false', ...Object.keys(FUNCTIONS)]);

/** Identifiers a capture may be named: not a variable, function or `inf`. */
export function isCaptureName(name: string): boolean {
  return /^[A-Za-z_][A-Za-z0-9_]*$/.test(name) && !RESERVED.has(name);
}

function tokenize(source: string, fail: (token: string, column: number, why: string) => never): Token[] {
  const tokens: Token[] = [];
  let i = 0;
  while (i < source.length) {
    const c = source[i];
    if (/\s/.test(c)) {
      i++;
      continue;
    }
    const number = /^(\d+\.?\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?)/.exec(source.slice(i));
    if (number) {
      const next = source[i + number[0].length];
      if (next !== undefined && /[A-Za-z_]/.test(next))
        fail(source.slice(i, i + number[0].length + 1), i, 'a number');
      tokens.push({ text: number[0], kind: 'number', column: i });
      i += number[0].length;
      continue;
    }
    const name = /^[A-Za-z_][A-Za-z0-9_]*/.exec(source.slice(i));
    if (name) {
      tokens.push({ text: name[0], kind: 'name', column: i });
      i += name[0].length;
      continue;
    }
    const op = OPERATORS.find((o) => source.startsWith(o, i));
    if (!op) fail(c, i, 'an operator, number or name');
    tokens.push({ text: op, kind: 'op', column: i });
    i += op.length;
  }
  tokens.push({ text: '(end)', kind: 'end', column: source.length });
  return tokens;
}

/**
 * Parses and type-checks `source`. `what` names the modifier in errors (e.g. "maskMod 'documentMask'");
 * `allowScore` says whether `score` is a variable (score modifiers only).
 */
export function parseExpression(
  what: string,
  source: string,
  captures: readonly CaptureShape[],
  allowScore: boolean,
): Expr {
  const expected = (why: string) =>
    `${why}, in an expression over b, h, q, kv${allowScore ? ', score' : ''} and captured tensors`;
  const fail = (token: string, column: number, why: string): never => {
    throw new InvalidArgumentError(
      what,
      expected(why),
      `the token '${token}' at column ${column + 1} of '${source}'`,
    );
  };
  if (typeof source !== 'string' || source.trim() === '') {
    throw new InvalidArgumentError(what, expected('a non-empty expression string'), describeValue(source));
  }
  const tokens = tokenize(source, fail);
  let at = 0;
  const peek = () => tokens[at];
  const take = () => tokens[at++];
  const expect = (text: string): Token => {
    const t = take();
    if (t.text !== text) fail(t.text, t.column, `'${text}'`);
    return t;
  };
  const typeError = (token: Token, why: string): never => fail(token.text, token.column, why);

  const numeric = (e: Expr, token: Token, op: string): void => {
    if (e.type === 'bool') typeError(token, `a number on each side of '${op}', not a boolean`);
  };
  const promote = (a: Expr, b: Expr): 'int' | 'float' =>
    a.type === 'float' || b.type === 'float' ? 'float' : 'int';

  function expression(): Expr {
    const test = binaryLevel(0);
    if (peek().text !== '?') return test;
    const mark = take();
    if (test.type !== 'bool') typeError(mark, "a boolean condition before '?'");
    const then = expression();
    const colon = expect(':');
    const otherwise = expression();
    if ((then.type === 'bool') !== (otherwise.type === 'bool'))
      typeError(colon, "both branches of '?:' booleans, or both numbers");
    const type = then.type === 'bool' ? 'bool' : promote(then, otherwise);
    return { kind: 'select', test, whenTrue: then, whenFalse: otherwise, type };
  }

  const LEVELS: readonly (readonly BinaryOp[])[] = [
    ['||'],
    ['&&'],
    ['==', '!='],
    ['<', '<=', '>', '>='],
    ['+', '-'],
    ['*', '/', '%'],
  ];

  function binaryLevel(level: number): Expr {
    if (level === LEVELS.length) return unary();
    let left = binaryLevel(level + 1);
    while ((LEVELS[level] as readonly string[]).includes(peek().text)) {
      const token = take();
      const op = token.text as BinaryOp;
      const right = binaryLevel(level + 1);
      left = { kind: 'binary', op, left, right, type: binaryType(op, left, right, token) };
    }
    return left;
  }

  function binaryType(op: BinaryOp, left: Expr, right: Expr, token: Token): ValueType {
    if (op === '&&' || op === '||') {
      if (left.type !== 'bool' || right.type !== 'bool')
        typeError(token, `a boolean on each side of '${op}'`);
      return 'bool';
    }
    if (op === '==' || op === '!=') {
      if ((left.type === 'bool') !== (right.type === 'bool'))
        typeError(token, `two booleans or two numbers on the sides of '${op}'`);
      return 'bool';
    }
    numeric(left, token, op);
    numeric(right, token, op);
    if (op === '<' || op === '<=' || op === '>' || op === '>=') return 'bool';
    if (op === '%' && promote(left, right) !== 'int') typeError(token, "integers on each side of '%'");
    return promote(left, right);
  }

  function unary(): Expr {
    const t = peek();
    if (t.text === '-' || t.text === '!') {
      take();
      const arg = unary();
      if (t.text === '!' && arg.type !== 'bool') typeError(t, "a boolean after '!'");
      if (t.text === '-' && arg.type === 'bool') typeError(t, "a number after '-'");
      return { kind: 'unary', op: t.text, arg, type: arg.type };
    }
    return primary();
  }

  function list(close: string): Expr[] {
    const items = [expression()];
    while (peek().text === ',') {
      take();
      items.push(expression());
    }
    expect(close);
    return items;
  }

  function primary(): Expr {
    const t = take();
    if (t.kind === 'number') {
      const value = Number(t.text);
      if (!Number.isFinite(value)) fail(t.text, t.column, 'a finite number');
      const isInt = /^\d+$/.test(t.text);
      if (isInt && value > 2 ** 31 - 1) fail(t.text, t.column, 'an integer below 2^31 (int32)');
      return { kind: 'number', value, type: isInt ? 'int' : 'float' };
    }
    if (t.text === '(') {
      const inner = expression();
      expect(')');
      return inner;
    }
    if (t.kind !== 'name') return fail(t.text, t.column, 'a number, a name or (');
    if (t.text === 'inf') return { kind: 'number', value: Number.POSITIVE_INFINITY, type: 'float' };
    if (t.text === 'true' || t.text === 'false')
      return { kind: 'number', value: t.text === 'true' ? 1 : 0, type: 'bool' };
    if (t.text === 'b' || t.text === 'h' || t.text === 'q' || t.text === 'kv')
      return { kind: 'variable', name: t.text, type: 'int' };
    if (t.text === 'score') {
      if (!allowScore) fail(t.text, t.column, 'no score in a mask modifier (use a score modifier)');
      return { kind: 'variable', name: 'score', type: 'float' };
    }
    if (t.text in FUNCTIONS) {
      const fn = t.text as FunctionName;
      expect('(');
      const args = list(')');
      if (args.length !== FUNCTIONS[fn]) fail(t.text, t.column, `${FUNCTIONS[fn]} argument(s) to ${fn}`);
      for (const a of args)
        if (a.type === 'bool') fail(t.text, t.column, `numbers as the arguments of ${fn}`);
      return { kind: 'call', fn, args, type: callType(fn, args) };
    }
    const capture = captures.findIndex((c) => c.name === t.text);
    if (capture < 0) {
      const names = captures.map((c) => c.name);
      return fail(
        t.text,
        t.column,
        `a variable, a function or a captured tensor${names.length ? ` (captured: ${names.join(', ')})` : ' (nothing is captured)'}`,
      );
    }
    const open = take();
    if (open.text !== '[') fail(open.text, open.column, `'[' after the captured tensor ${t.text}`);
    const indices = list(']');
    const { rank, type } = captures[capture];
    if (indices.length !== rank) fail(t.text, t.column, `${rank} index(es) for ${t.text}, one per dimension`);
    for (const index of indices) {
      if (index.type !== 'int')
        fail(t.text, t.column, `integer indices into ${t.text} (use int(...) to convert)`);
    }
    return { kind: 'read', capture, indices, type };
  }

  function callType(fn: FunctionName, args: readonly Expr[]): ValueType {
    switch (fn) {
      case 'abs':
        return args[0].type;
      case 'min':
      case 'max':
        return promote(args[0], args[1]);
      case 'int':
        return 'int';
      default:
        return 'float';
    }
  }

  const root = expression();
  const end = peek();
  if (end.kind !== 'end') fail(end.text, end.column, 'the end of the expression');
  return root;
}
