/**
 * A checked expression lowered to a straight-line program (one instruction per node, operands before
 * their users, the result last). The CUDA generator (cuda.ts) and the CPU evaluator below both read this
 * one form, so the device function and the oracle compute the same thing by construction; the backward
 * is reverse-mode differentiation of the same instruction list.
 *
 * CPU arithmetic is float64 for floats (the oracle's precision) and int32 for ints: `+ - *` wrap like the
 * GPU's, `/` and `%` truncate toward zero as in C, and an integer division by zero gives 0 on both.
 */

import { InvalidArgumentError } from '../errors.js';
import type { BinaryOp, Expr, FunctionName, IndexVariable, ValueType } from './expression.js';

export type Instr =
  | { readonly op: 'const'; readonly value: number; readonly type: ValueType; readonly args: readonly [] }
  | {
      readonly op: 'var';
      readonly name: IndexVariable | 'score';
      readonly type: ValueType;
      readonly args: readonly [];
    }
  | {
      readonly op: 'read';
      readonly capture: number;
      readonly type: ValueType;
      readonly args: readonly number[];
    }
  | { readonly op: 'neg' | 'not'; readonly type: ValueType; readonly args: readonly [number] }
  | { readonly op: BinaryOp; readonly type: ValueType; readonly args: readonly [number, number] }
  | {
      readonly op: 'call';
      readonly fn: FunctionName;
      readonly type: ValueType;
      readonly args: readonly number[];
    }
  | { readonly op: 'select'; readonly type: ValueType; readonly args: readonly [number, number, number] };

export interface Program {
  readonly instrs: readonly Instr[];
  /** The types of each instruction's operands (for promotion and differentiation). */
  readonly types: readonly ValueType[];
}

export function lower(root: Expr): Program {
  const instrs: Instr[] = [];
  const push = (i: Instr): number => instrs.push(i) - 1;
  const visit = (e: Expr): number => {
    switch (e.kind) {
      case 'number':
        return push({ op: 'const', value: e.value, type: e.type, args: [] });
      case 'variable':
        return push({ op: 'var', name: e.name, type: e.type, args: [] });
      case 'read':
        return push({ op: 'read', capture: e.capture, type: e.type, args: e.indices.map(visit) });
      case 'unary':
        return push({ op: e.op === '-' ? 'neg' : 'not', type: e.type, args: [visit(e.arg)] });
      case 'binary': {
        const left = visit(e.left);
        return push({ op: e.op, type: e.type, args: [left, visit(e.right)] });
      }
      case 'call':
        return push({ op: 'call', fn: e.fn, type: e.type, args: e.args.map(visit) });
      case 'select': {
        const test = visit(e.test);
        const whenTrue = visit(e.whenTrue);
        return push({ op: 'select', type: e.type, args: [test, whenTrue, visit(e.whenFalse)] });
      }
    }
  };
  visit(root);
  return { instrs, types: instrs.map((i) => i.type) };
}

/** Which instructions lead to the score or to a read of a capture in `learned` (the backward's work). */
export function differentiable(program: Program, learned: ReadonlySet<number>): boolean[] {
  const needs = program.instrs.map(() => false);
  program.instrs.forEach((instr, n) => {
    if (instr.type !== 'float') return;
    if (instr.op === 'var') needs[n] = instr.name === 'score';
    else if (instr.op === 'read') needs[n] = learned.has(instr.capture);
    // floor and ceil are piecewise constant: no derivative flows through them.
    else if (instr.op === 'call' && (instr.fn === 'floor' || instr.fn === 'ceil')) needs[n] = false;
    else if (instr.op !== 'const')
      needs[n] = instr.args.some((a) => needs[a] && program.types[a] === 'float');
  });
  return needs;
}

/** A captured tensor's host data as the CPU evaluator reads it. */
export interface HostCapture {
  readonly name: string;
  readonly data: Int32Array | Float32Array;
  readonly shape: readonly number[];
  /** Row-major element strides, 0 on a dimension of size 1 (broadcast). */
  readonly strides: readonly number[];
}

/** The indices of one call: b, h, q, kv and the score. */
export interface Point {
  b: number;
  h: number;
  q: number;
  kv: number;
  score: number;
}

export function readOffset(
  what: string,
  capture: HostCapture,
  indices: readonly number[],
  at: Point,
): number {
  let offset = 0;
  for (let d = 0; d < indices.length; d++) {
    const index = indices[d];
    const size = capture.shape[d];
    if (size === 1) continue; // broadcast: stride 0, as on the device
    if (!(index >= 0 && index < size)) {
      throw new InvalidArgumentError(
        what,
        `indices of ${capture.name} within its shape [${capture.shape.join(', ')}]`,
        `index ${index} on dimension ${d} at b=${at.b} h=${at.h} q=${at.q} kv=${at.kv}`,
      );
    }
    offset += index * capture.strides[d];
  }
  return offset;
}

const intOf = (x: number): number => (Number.isFinite(x) ? Math.trunc(x) | 0 : 0);

/** Evaluates every instruction at `at` into `values` (float64; booleans as 0/1) and returns the result. */
export function evaluate(
  what: string,
  program: Program,
  captures: readonly HostCapture[],
  at: Point,
  values: Float64Array,
): number {
  const { instrs } = program;
  for (let n = 0; n < instrs.length; n++) {
    const instr = instrs[n];
    const args = instr.args as readonly number[];
    const a = args.length > 0 ? values[args[0]] : 0;
    const b = args.length > 1 ? values[args[1]] : 0;
    const ints = instr.type === 'int';
    let r: number;
    switch (instr.op) {
      case 'const':
        r = instr.value;
        break;
      case 'var':
        r = at[instr.name];
        break;
      case 'read': {
        const c = captures[instr.capture];
        r =
          c.data[
            readOffset(
              what,
              c,
              instr.args.map((i) => values[i]),
              at,
            )
          ];
        break;
      }
      case 'neg':
        r = ints ? -a | 0 : -a;
        break;
      case 'not':
        r = a ? 0 : 1;
        break;
      case '+':
        r = ints ? (a + b) | 0 : a + b;
        break;
      case '-':
        r = ints ? (a - b) | 0 : a - b;
        break;
      case '*':
        r = ints ? Math.imul(a, b) : a * b;
        break;
      case '/':
        r = ints ? (b === 0 ? 0 : (a / b) | 0) : a / b;
        break;
      case '%':
        r = b === 0 ? 0 : (a % b) | 0;
        break;
      case '==':
        r = a === b ? 1 : 0;
        break;
      case '!=':
        r = a !== b ? 1 : 0;
        break;
      case '<':
        r = a < b ? 1 : 0;
        break;
      case '<=':
        r = a <= b ? 1 : 0;
        break;
      case '>':
        r = a > b ? 1 : 0;
        break;
      case '>=':
        r = a >= b ? 1 : 0;
        break;
      case '&&':
        r = a && b ? 1 : 0;
        break;
      case '||':
        r = a || b ? 1 : 0;
        break;
      case 'select':
        r = a ? b : values[instr.args[2]];
        break;
      case 'call':
        r = callValue(instr.fn, a, b, ints);
        break;
    }
    values[n] = r;
  }
  return values[instrs.length - 1];
}

function callValue(fn: FunctionName, a: number, b: number, ints: boolean): number {
  switch (fn) {
    case 'abs':
      return ints ? Math.abs(a) | 0 : Math.abs(a);
    case 'min':
      return Math.min(a, b);
    case 'max':
      return Math.max(a, b);
    case 'exp':
      return Math.exp(a);
    case 'log':
      return Math.log(a);
    case 'sqrt':
      return Math.sqrt(a);
    case 'tanh':
      return Math.tanh(a);
    case 'floor':
      return Math.floor(a);
    case 'ceil':
      return Math.ceil(a);
    case 'int':
      return intOf(a);
    case 'float':
      return a;
  }
}

/**
 * Reverse-mode pass over values `evaluate` left: returns g·d(result)/d(score) and adds
 * g·d(result)/d(read) into `grads[capture][offset]` for each read of a capture in `learned`.
 */
export function backward(
  what: string,
  program: Program,
  captures: readonly HostCapture[],
  learned: ReadonlySet<number>,
  at: Point,
  values: Float64Array,
  adjoints: Float64Array,
  g: number,
  grads: readonly Float64Array[],
): number {
  const { instrs, types } = program;
  const last = instrs.length - 1;
  adjoints.fill(0, 0, instrs.length);
  adjoints[last] = g;
  let dScore = 0;
  for (let n = last; n >= 0; n--) {
    const instr = instrs[n];
    const adj = adjoints[n];
    if (instr.type !== 'float' || adj === 0) continue;
    const give = (arg: number, amount: number): void => {
      if (types[arg] === 'float') adjoints[arg] += amount;
    };
    const [x, y] = instr.args as readonly number[];
    switch (instr.op) {
      case 'var':
        if (instr.name === 'score') dScore += adj;
        break;
      case 'read':
        if (learned.has(instr.capture)) {
          const c = captures[instr.capture];
          grads[instr.capture][
            readOffset(
              what,
              c,
              instr.args.map((i) => values[i]),
              at,
            )
          ] += adj;
        }
        break;
      case 'neg':
        give(x, -adj);
        break;
      case '+':
        give(x, adj);
        give(y, adj);
        break;
      case '-':
        give(x, adj);
        give(y, -adj);
        break;
      case '*':
        give(x, adj * values[y]);
        give(y, adj * values[x]);
        break;
      case '/':
        give(x, adj / values[y]);
        give(y, (-adj * values[n]) / values[y]);
        break;
      case 'select':
        give(values[x] ? y : instr.args[2], adj);
        break;
      case 'call':
        callAdjoint(instr.fn, values, instr.args, values[n], adj, give);
        break;
      default:
        break; // constants, comparisons: no derivative
    }
  }
  return dScore;
}

function callAdjoint(
  fn: FunctionName,
  values: Float64Array,
  args: readonly number[],
  result: number,
  adj: number,
  give: (arg: number, amount: number) => void,
): void {
  const a = values[args[0]];
  switch (fn) {
    case 'abs':
      give(args[0], a > 0 ? adj : a < 0 ? -adj : 0);
      break;
    case 'min':
      give(a <= values[args[1]] ? args[0] : args[1], adj);
      break;
    case 'max':
      give(a >= values[args[1]] ? args[0] : args[1], adj);
      break;
    case 'exp':
      give(args[0], adj * result);
      break;
    case 'log':
      give(args[0], adj / a);
      break;
    case 'sqrt':
      give(args[0], (0.5 * adj) / result);
      break;
    case 'tanh':
      give(args[0], adj * (1 - result * result));
      break;
    case 'float':
      give(args[0], adj);
      break;
    default:
      break; // floor, ceil, int: piecewise constant
  }
}
