/**
 * The CUDA device functions of a modifier set (docs/internals/variants.md has the contract):
 * `attnlab_score_mod`, `attnlab_mask_mod` and `attnlab_score_mod_backward`, emitted from the same
 * straight-line programs the CPU evaluates (program.ts), one `const` per instruction. All three are
 * always defined (identity, keep-all, g) so a kernel may call them unconditionally; the ATTNLAB_* macros
 * say which are real, and a kernel built without modifiers never sees this source.
 */

import { differentiable, type Instr, type Program } from './program.js';

/** The capture slots a kernel parameter holds (AttnlabCaptures' arrays). */
export const MAX_CAPTURES = 8;
/** The most index expressions one capture read takes (AttnlabCaptures.stride's second dimension). */
export const MAX_CAPTURE_RANK = 4;

/** A modifier's program with its captures mapped to kernel capture slots. */
export interface SlottedProgram {
  readonly program: Program;
  /** Kernel slot of the modifier's capture i. */
  readonly slots: readonly number[];
  /** 'int' or 'float' element type of the modifier's capture i. */
  readonly captureTypes: readonly ('int' | 'float')[];
  /** One line describing the modifier, written as a comment above its function. */
  readonly label: string;
}

const CTYPE = { int: 'int', float: 'float', bool: 'bool' } as const;

function literal(value: number, type: Instr['type']): string {
  if (type === 'bool') return value ? 'true' : 'false';
  if (type === 'int') return String(value);
  if (value === Number.POSITIVE_INFINITY) return '__int_as_float(0x7f800000)';
  const text = String(value);
  return /[.eE]/.test(text) ? `${text}f` : `${text}.0f`;
}

function cast(v: string, from: Instr['type'], to: Instr['type']): string {
  return from === to || to === 'bool' ? v : `(${CTYPE[to]})${v}`;
}

/**
 * The bound the kernels that define ATTNLAB_POSITIONS_BELOW_2_22 guarantee for q and kv (b and h are
 * below 2^16: a grid dimension); an int value whose range the program keeps inside ±SMALL_INT is
 * converted to float by attnlab_small_i2f.
 */
const POSITION_LIMIT = 2 ** 22;
const SMALL_INT = 2 ** 22;
const INT_LIMIT = 2 ** 31;

/**
 * The range [lo, hi] of each int instruction when q and kv lie in [0, positions) and b, h in
 * [0, 2^16) (grid dimensions): ±Infinity where a bound is unknown (a captured tensor's value, a
 * float truncated to int, or an operation that may wrap past int32); for the other types null.
 */
export function intRanges(
  program: Program,
  positions: number = POSITION_LIMIT,
): ReadonlyArray<readonly [number, number] | null> {
  const ranges: Array<readonly [number, number] | null> = [];
  const ANY = [Number.NEGATIVE_INFINITY, Number.POSITIVE_INFINITY] as const;
  // A result that may leave int32 wraps: any value.
  const fit = (lo: number, hi: number): readonly [number, number] =>
    Number.isNaN(lo) || Number.isNaN(hi) || lo <= -INT_LIMIT || hi >= INT_LIMIT ? ANY : [lo, hi];
  const magnitude = (r: readonly [number, number]) => Math.max(Math.abs(r[0]), Math.abs(r[1]));
  program.instrs.forEach((instr, n) => {
    if (instr.type !== 'int') {
      ranges[n] = null;
      return;
    }
    const [a, b] = instr.args.map((k) => ranges[k] ?? ANY);
    let range: readonly [number, number] = ANY;
    switch (instr.op) {
      case 'const':
        range = [instr.value, instr.value];
        break;
      case 'var':
        range = instr.name === 'q' || instr.name === 'kv' ? [0, positions - 1] : [0, 65535];
        break;
      case 'neg':
        range = fit(-a[1], -a[0]);
        break;
      case '+':
        range = fit(a[0] + b[0], a[1] + b[1]);
        break;
      case '-':
        range = fit(a[0] - b[1], a[1] - b[0]);
        break;
      case '*': {
        const products = [a[0] * b[0], a[0] * b[1], a[1] * b[0], a[1] * b[1]];
        range = fit(Math.min(...products), Math.max(...products));
        break;
      }
      case '/':
        // |a / b| ≤ |a|, and a division by zero gives 0.
        range = fit(-magnitude(a), magnitude(a));
        break;
      case '%': {
        // |a % b| < |b| and ≤ |a|.
        const m = Math.min(magnitude(a), Math.max(0, magnitude(b) - 1));
        range = fit(-m, m);
        break;
      }
      case 'select': {
        const [t, f] = [ranges[instr.args[1]] ?? ANY, ranges[instr.args[2]] ?? ANY];
        range = [Math.min(t[0], f[0]), Math.max(t[1], f[1])];
        break;
      }
      case 'call':
        if (instr.fn === 'abs') range = fit(a[0] >= 0 ? a[0] : a[1] <= 0 ? -a[1] : 0, magnitude(a));
        else if (instr.fn === 'min') range = [Math.min(a[0], b[0]), Math.min(a[1], b[1])];
        else if (instr.fn === 'max') range = [Math.max(a[0], b[0]), Math.max(a[1], b[1])];
        break;
      default:
        break;
    }
    ranges[n] = range;
  });
  return ranges;
}

/** Whether instruction n is an int the kernels' position bound keeps inside ±2^22 (attnlab_small_i2f). */
function smallInt(ranges: ReturnType<typeof intRanges>, n: number): boolean {
  const r = ranges[n];
  return r !== null && r[0] > -SMALL_INT && r[1] < SMALL_INT;
}

/**
 * One `const` per instruction; reads keep their element offset in `oN` for the backward's atomics.
 * `overrides` replaces instruction n's expression (the folded function's pre-scaled score).
 */
function forwardLines(
  p: SlottedProgram,
  indent: string,
  overrides: ReadonlyMap<number, string> = new Map(),
): string[] {
  const { instrs, types } = p.program;
  const ranges = intRanges(p.program);
  const lines: string[] = [];
  const v = (n: number) => `v${n}`;
  // Instruction n as `to`: an int whose range fits ±2^22 becomes a float by two FP32-pipe operations
  // (attnlab_small_i2f) rather than I2F, which issues at a quarter of the rate on the exponentials' unit.
  const as = (n: number, to: Instr['type']) =>
    types[n] === 'int' && to === 'float' && smallInt(ranges, n)
      ? `attnlab_small_i2f(${v(n)})`
      : cast(v(n), types[n], to);
  instrs.forEach((instr, n) => {
    const t = instr.type;
    // An operand enters a float operation as float (C promotes, but being explicit keeps int/float math apart).
    const arg = (k: number) => as(instr.args[k], t === 'bool' ? types[instr.args[k]] : t);
    let expr: string;
    switch (instr.op) {
      case 'const':
        expr = literal(instr.value, t);
        break;
      case 'var':
        expr = instr.name === 'score' ? 's' : instr.name;
        break;
      case 'read': {
        const slot = p.slots[instr.capture];
        const offset = instr.args.map((a, d) => `(long long)${v(a)} * c.stride[${slot}][${d}]`).join(' + ');
        lines.push(`${indent}const long long o${n} = ${offset};`);
        const elem = p.captureTypes[instr.capture] === 'int' ? 'int' : 'float';
        expr = `static_cast<const ${elem}*>(c.ptr[${slot}])[o${n}]`;
        break;
      }
      case 'neg':
        expr = `-${v(instr.args[0])}`;
        break;
      case 'not':
        expr = `!${v(instr.args[0])}`;
        break;
      case '/': {
        const divisor = reciprocal(instrs[instr.args[1]]);
        expr =
          t === 'int'
            ? `attnlab_idiv(${arg(0)}, ${arg(1)})`
            : divisor
              ? `${arg(0)} * ${divisor}`
              : `${arg(0)} / ${arg(1)}`;
        break;
      }
      case '%':
        expr = `attnlab_imod(${arg(0)}, ${arg(1)})`;
        break;
      case '==':
      case '!=':
      case '<':
      case '<=':
      case '>':
      case '>=': {
        // Compare in the wider type of the two operands.
        const [a, b] = instr.args;
        const wide = types[a] === 'float' || types[b] === 'float' ? 'float' : types[a];
        expr = `${as(a, wide)} ${instr.op} ${as(b, wide)}`;
        break;
      }
      case 'select':
        expr = `${v(instr.args[0])} ? ${arg(1)} : ${arg(2)}`;
        break;
      case 'call':
        expr = callExpr(
          instr.fn,
          instr.args.map((a) => v(a)),
          instr.args.map((a) => types[a]),
          t,
          instr.args.map((a) => as(a, 'float')),
        );
        break;
      default:
        expr = `${arg(0)} ${instr.op} ${arg(1)}`;
    }
    // A constant that only a divisor used is folded into its reciprocal literal (x · (1/c)) and left
    // unread: nvcc would warn #177-D about it, and the generated code compiles warning-free. So is the
    // score's variable where an override stands for its only use.
    const override = overrides.get(n);
    if (override !== undefined) expr = override;
    const unused =
      instr.op === 'const' || (instr.op === 'var' && overrides.size > 0) ? '[[maybe_unused]] ' : '';
    lines.push(`${indent}${unused}const ${CTYPE[t]} ${v(n)} = ${expr};`);
  });
  return lines;
}

/**
 * `1/c` as a float literal when `divisor` is a float constant whose reciprocal is a normal float32:
 * x / c becomes x · (1/c), one FMUL where IEEE division is a reciprocal, two FMAs and a range check
 * (within 1.5 ulp of the quotient: softcap's score / 30 on every score).
 */
function reciprocal(divisor: Instr): string | null {
  if (divisor.op !== 'const' || divisor.type !== 'float') return null;
  const r = 1 / divisor.value;
  if (!Number.isFinite(r) || r === 0 || Math.abs(r) < 2 ** -126 || Math.abs(r) > 3.4e38) return null;
  return literal(r, 'float');
}

function callExpr(
  fn: string,
  args: string[],
  types: Instr['type'][],
  t: Instr['type'],
  floats: string[],
): string {
  const f = (k: number) => floats[k] ?? cast(args[k], types[k], 'float');
  switch (fn) {
    case 'abs':
      return t === 'int' ? `abs(${args[0]})` : `fabsf(${args[0]})`;
    case 'min':
    case 'max':
      return t === 'int' ? `${fn}(${args[0]}, ${args[1]})` : `f${fn}f(${f(0)}, ${f(1)})`;
    case 'tanh':
      return `attnlab_tanh(${f(0)})`;
    case 'exp':
    case 'log':
    case 'sqrt':
    case 'floor':
    case 'ceil':
      return `${fn}f(${f(0)})`;
    case 'int':
      // Truncation toward zero as on the CPU; NaN and ±inf become 0 there, so they do here too.
      return types[0] === 'int'
        ? args[0]
        : `(fabsf(${args[0]}) < __int_as_float(0x7f800000) ? __float2int_rz(${args[0]}) : 0)`;
    default:
      return f(0); // float(x)
  }
}

/**
 * Reverse mode over the program: `aN` is g·d(result)/d(vN). Returns the lines (the score's adjoint in `ds`)
 * and adds atomics for reads of learned captures inside `#if ATTNLAB_CAPTURE_GRADS`.
 */
function backwardLines(p: SlottedProgram, learned: ReadonlySet<number>, indent: string): string[] {
  const { instrs, types } = p.program;
  const needs = differentiable(p.program, learned);
  const last = instrs.length - 1;
  const contributions: string[][] = instrs.map(() => []);
  const lines: string[] = [`${indent}float ds = 0.0f;`];
  if (!needs[last]) return lines;
  contributions[last].push('g');
  for (let n = last; n >= 0; n--) {
    if (!needs[n]) continue;
    const instr = instrs[n];
    // No contribution: every path from here to the result passes a piecewise-constant step (floor, ceil).
    lines.push(`${indent}const float a${n} = ${contributions[n].join(' + ') || '0.0f'};`);
    const a = `a${n}`;
    const give = (arg: number, amount: string) => {
      if (needs[arg] && types[arg] === 'float') contributions[arg].push(`(${amount})`);
    };
    const [x, y] = instr.args as readonly number[];
    switch (instr.op) {
      case 'var':
        lines.push(`${indent}ds += ${a};`);
        break;
      case 'read': {
        const slot = p.slots[instr.capture];
        lines.push(
          `#if ATTNLAB_CAPTURE_GRADS`,
          `${indent}atomicAdd(c.grad[${slot}] + o${n}, ${a});`,
          '#endif',
        );
        break;
      }
      case 'neg':
        give(x, `-${a}`);
        break;
      case '+':
        give(x, a);
        give(y, a);
        break;
      case '-':
        give(x, a);
        give(y, `-${a}`);
        break;
      case '*':
        give(x, `${a} * (float)v${y}`);
        give(y, `${a} * (float)v${x}`);
        break;
      case '/': {
        const divisor = reciprocal(instrs[y]);
        give(x, divisor ? `${a} * ${divisor}` : `${a} / (float)v${y}`);
        give(y, `-${a} * v${n} / (float)v${y}`);
        break;
      }
      case 'select':
        give(y, `v${x} ? ${a} : 0.0f`);
        give(instr.args[2], `v${x} ? 0.0f : ${a}`);
        break;
      case 'call': {
        const [u, w] = [`(float)v${x}`, `(float)v${y}`];
        if (instr.fn === 'abs') give(x, `${u} > 0.0f ? ${a} : (${u} < 0.0f ? -${a} : 0.0f)`);
        else if (instr.fn === 'min') {
          give(x, `${u} <= ${w} ? ${a} : 0.0f`);
          give(y, `${u} <= ${w} ? 0.0f : ${a}`);
        } else if (instr.fn === 'max') {
          give(x, `${u} >= ${w} ? ${a} : 0.0f`);
          give(y, `${u} >= ${w} ? 0.0f : ${a}`);
        } else if (instr.fn === 'exp') give(x, `${a} * v${n}`);
        else if (instr.fn === 'log') give(x, `${a} / ${u}`);
        else if (instr.fn === 'sqrt') give(x, `0.5f * ${a} / v${n}`);
        else if (instr.fn === 'tanh') give(x, `${a} * (1.0f - v${n} * v${n})`);
        else if (instr.fn === 'float') give(x, a);
        break;
      }
      default:
        break;
    }
  }
  return lines;
}

/**
 * Whether the program reads a captured tensor at an index that depends on q or kv and that the program
 * does not bound whatever they are (`keyBias[b, kv]`, `rowScale[b, q]`; not ALiBi's `slopes[h]` or
 * relativeBias's `table[h, min(max(kv − q, −D), D) + D]`): the kernels then evaluate the modifier only on
 * pairs inside the lengths (mask.cuh), so that the read stays inside a tensor of T or S positions, and
 * otherwise on every score of a tile with no test.
 */
export function readsAtPositions(program: Program): boolean {
  const onPosition: boolean[] = [];
  const unbounded = intRanges(program, Number.POSITIVE_INFINITY);
  return program.instrs.some((instr, n) => {
    onPosition[n] =
      instr.op === 'var' ? instr.name === 'q' || instr.name === 'kv' : instr.args.some((a) => onPosition[a]);
    return (
      instr.op === 'read' &&
      instr.args.some((a) => {
        const r = unbounded[a];
        return onPosition[a] && !(r && Number.isFinite(r[0]) && Number.isFinite(r[1]));
      })
    );
  });
}

/**
 * Constant factors a score modifier applies to its input and its output, which a kernel may fold into
 * its own multiplies: `input` is the instruction that scales the score (`score * K`, `K * score` or
 * `score / K`, the score's only use) and `inScale` its factor; `output` the last instruction when it
 * is such a product or quotient by a positive constant (`K * x`, `x * K`, `x / K`), `outScale` its
 * factor and `outArg` x. softcap(c), `c * tanh(score / c)`, folds both: the kernel passes
 * raw · (scale / c) and multiplies the softmax's log2(e) by c, two FP32 multiplies a score fewer.
 * Null when neither applies.
 */
export function scoreScales(program: Program): {
  readonly input: number | null;
  readonly inScale: number;
  readonly output: number | null;
  readonly outScale: number;
  readonly outArg: number;
} | null {
  const { instrs, types } = program;
  const constant = (n: number) => {
    const i = instrs[n];
    return i.op === 'const' && types[n] === 'float' && Number.isFinite(i.value) ? i.value : null;
  };
  // K of `x * K`, `K * x` or `x / K` (with x at `arg`), or null.
  const factorOf = (instr: Instr, arg: number): number | null => {
    if (instr.type !== 'float' || types[arg] !== 'float') return null;
    const [a, b] = instr.args;
    if (instr.op === '*') return a === arg ? constant(b) : b === arg ? constant(a) : null;
    if (instr.op === '/' && a === arg && b !== arg) {
      const k = constant(b);
      return k !== null && reciprocal(instrs[b]) !== null ? 1 / k : null;
    }
    return null;
  };
  const uses = instrs.map(() => 0);
  for (const i of instrs) for (const a of i.args) uses[a]++;
  const scores = instrs.flatMap((i, n) => (i.op === 'var' && i.name === 'score' ? [n] : []));
  let input: number | null = null;
  let inScale = 1;
  if (scores.length === 1 && uses[scores[0]] === 1) {
    const user = instrs.findIndex((i) => (i.args as readonly number[]).includes(scores[0]));
    const k = user >= 0 ? factorOf(instrs[user], scores[0]) : null;
    if (k !== null && Math.abs(k) < 2 ** 64 && Math.abs(k) > 2 ** -64) [input, inScale] = [user, k];
  }
  const last = instrs.length - 1;
  let output: number | null = null;
  let outScale = 1;
  let outArg = last;
  const lastInstr = instrs[last];
  if (last !== input && (lastInstr.op === '*' || lastInstr.op === '/')) {
    for (const arg of lastInstr.args) {
      if (constant(arg) !== null && lastInstr.op === '*') continue;
      const k = factorOf(lastInstr, arg);
      if (k !== null && k > 0 && Number.isFinite(k) && k < 2 ** 64 && k > 2 ** -64) {
        [output, outScale, outArg] = [last, k, arg];
        break;
      }
    }
  }
  return input === null && output === null ? null : { input, inScale, output, outScale, outArg };
}

/**
 * Whether the score modifier's backward reads a value computed from the score (ATTNLAB_SCORE_MOD_NEEDS_SCORE):
 * not for an additive modifier (ALiBi, a relative bias), whose gradient is g; the backward loops then skip
 * recomputing the raw score, one Q·Kᵀ product a tile.
 */
function needsScore(p: SlottedProgram, learned: ReadonlySet<number>): boolean {
  const dep = scoreDependent(p.program);
  for (const n of readValues(backwardLines(p, learned, ''))) if (dep[n]) return true;
  return false;
}

/** Which instructions depend on the score: the score itself and everything computed from it. */
function scoreDependent(program: Program): boolean[] {
  const dep: boolean[] = [];
  program.instrs.forEach((instr, n) => {
    dep[n] = instr.op === 'var' ? instr.name === 'score' : instr.args.some((a) => dep[a]);
  });
  return dep;
}

/** The `vN` values a block of generated lines reads. */
function readValues(lines: readonly string[]): Set<number> {
  const read = new Set<number>();
  for (const line of lines) for (const m of line.matchAll(/\bv(\d+)\b/g)) read.add(Number(m[1]));
  return read;
}

/** Operations whose derivative is a function of their own output: tanh (1 − y²), exp (y), sqrt (1 / 2y). */
const OUTPUT_DERIVATIVE = new Set(['tanh', 'exp', 'sqrt']);

/**
 * The score modifier's backward as a function of its output y = scoreMod(s) instead of s, or null when
 * the program is not of that form. A kernel that has P = 2^(log2e·y − lse2) recovers y from P with one
 * logarithm, where recomputing s costs a Q·Kᵀ product a tile and the backward then evaluates the
 * modifier's own nonlinearity again (softcap: a second tanh a score).
 *
 * The form: the score flows through one chain of instructions to the result (each takes exactly one
 * score-dependent operand, and no score-dependent value is used twice), with one operation whose
 * derivative reads only its output (tanh, exp, sqrt) and affine steps around it (± a score-independent
 * value, negation, × or ÷ by one, float()); above that operation the steps are inverted from y (× and ÷
 * only by a nonzero literal, so the inverse never divides by a captured zero), below it their derivatives
 * read no score-dependent value. No learned capture: its gradient would read values below the operation.
 * softcap's `c * tanh(score / c)` gives t = y · (1/c), ds = g · (1/c) · (1 − t²) · c.
 */
function fromOutputLines(p: SlottedProgram, learned: ReadonlySet<number>, indent: string): string[] | null {
  const { instrs, types } = p.program;
  const dep = scoreDependent(p.program);
  const needs = differentiable(p.program, learned);
  const last = instrs.length - 1;
  if (!dep[last] || needs.some((x, n) => x && !dep[n])) return null;
  // The chain from the result down to the score.
  const chain: number[] = [];
  for (let n = last; ; ) {
    chain.push(n);
    const instr = instrs[n];
    if (instr.op === 'var') break;
    const onChain = instr.args.filter((a) => dep[a]);
    if (onChain.length !== 1 || types[n] !== 'float') return null;
    n = onChain[0];
  }
  if (chain.length !== dep.filter(Boolean).length) return null;
  const pivotAt = chain.findIndex((n) => {
    const instr = instrs[n];
    return instr.op === 'call' && OUTPUT_DERIVATIVE.has(instr.fn);
  });
  if (pivotAt < 0) return null;
  const nonzeroLiteral = (n: number) => {
    const instr = instrs[n];
    return instr.op === 'const' && instr.value !== 0 && Number.isFinite(1 / instr.value) ? instr.value : null;
  };
  const inverse: string[] = [`${indent}const float v${last} = y;`];
  for (let k = 0; k < chain.length - 1; k++) {
    const n = chain[k];
    const below = chain[k + 1];
    const instr = instrs[n];
    const [x, y] = instr.args as readonly number[];
    const other = x === below ? y : x;
    const affine =
      instr.op === 'neg' ||
      instr.op === '+' ||
      instr.op === '-' ||
      instr.op === '*' ||
      (instr.op === '/' && x === below) ||
      (instr.op === 'call' && instr.fn === 'float');
    if (k < pivotAt) {
      // Above the pivot: invert the step, the value below from the value above.
      let expr: string;
      if (instr.op === 'neg') expr = `-v${n}`;
      else if (instr.op === '+') expr = `v${n} - (float)v${other}`;
      else if (instr.op === '-') expr = x === below ? `v${n} + (float)v${other}` : `(float)v${other} - v${n}`;
      else if (instr.op === '*' || instr.op === '/') {
        const c = nonzeroLiteral(other);
        if (c === null || !(instr.op === '*' || x === below)) return null;
        expr = `v${n} * ${literal(instr.op === '*' ? 1 / c : c, 'float')}`;
      } else if (instr.op === 'call' && instr.fn === 'float') expr = `v${n}`;
      else return null;
      inverse.push(`${indent}const float v${below} = ${expr};`);
    } else if (k > pivotAt && !affine) {
      return null;
    }
  }
  const known = new Set(chain.slice(0, pivotAt + 1));
  const independent = forwardLines(p, indent).filter((line) => {
    const m = /const \w+ [vo](\d+) =/.exec(line);
    return !(m && dep[Number(m[1])]);
  });
  const backward = backwardLines(p, learned, indent);
  for (const n of readValues(backward)) if (dep[n] && !known.has(n)) return null;
  // A value only the dropped score-dependent lines read is left unread (nvcc would warn #177-D).
  const quiet = (line: string) => line.replace(/^(\s*)const /, '$1[[maybe_unused]] const ');
  return [...independent.map(quiet), ...inverse.map(quiet), ...backward];
}

/** The device functions of one modifier set (the head of CompiledModifiers.cudaSource). */
export function generateCuda(
  score: SlottedProgram | null,
  mask: SlottedProgram | null,
  learned: ReadonlySet<number>,
  captureGrads: boolean,
  fold = false,
): string {
  const signature = 'int b, int h, int q, int kv, const AttnlabCaptures& c';
  // The folded form only where asked for (ATTNLAB_FOLD_SCORE_FACTORS: compile.ts passes it).
  const scales = score && fold ? scoreScales(score.program) : null;
  const fromOutput = score ? fromOutputLines(score, learned, '  ') : null;
  const out: string[] = [
    '// Generated by attnlab from modifier expressions (src/variants/cuda.ts).',
    `#define ATTNLAB_SCORE_MOD ${score ? 1 : 0}`,
    `#define ATTNLAB_MASK_MOD ${mask ? 1 : 0}`,
    `#define ATTNLAB_CAPTURE_GRADS ${captureGrads ? 1 : 0}`,
    `#define ATTNLAB_SCORE_MOD_READS_POSITIONS ${score && readsAtPositions(score.program) ? 1 : 0}`,
    ...(scales
      ? [
          '#define ATTNLAB_SCORE_MOD_FOLDED 1',
          `#define ATTNLAB_SCORE_MOD_IN_SCALE ${literal(scales.inScale, 'float')}`,
          `#define ATTNLAB_SCORE_MOD_OUT_SCALE ${literal(scales.outScale, 'float')}`,
        ]
      : []),
    `#define ATTNLAB_SCORE_MOD_NEEDS_SCORE ${score && needsScore(score, learned) ? 1 : 0}`,
    `#define ATTNLAB_SCORE_MOD_GRAD_FROM_OUTPUT ${fromOutput ? 1 : 0}`,
    CAPTURES_STRUCT,
    '__device__ __forceinline__ int attnlab_idiv(int a, int b) { return b == 0 ? 0 : a / b; }',
    '__device__ __forceinline__ int attnlab_imod(int a, int b) { return b == 0 ? 0 : a % b; }',
    ...HELPERS,
  ];
  const unused = '  (void)b; (void)h; (void)q; (void)kv; (void)c;';
  if (score) {
    const lines = forwardLines(score, '  ');
    const result = `v${score.program.instrs.length - 1}`;
    const resultType = score.program.types[score.program.instrs.length - 1];
    // The folded form (scoreScales): s comes scaled by ATTNLAB_SCORE_MOD_IN_SCALE, the result leaves
    // divided by ATTNLAB_SCORE_MOD_OUT_SCALE (flash/mask.cuh modify_scores multiplies it back inside
    // the softmax's factor). Only the forward's tile pass reads it. It comes first, so that the
    // modifier's own three functions follow one another as without a fold.
    if (scales) {
      const overrides = new Map(
        scales.input === null ? [] : ([[scales.input, 's']] as Array<[number, string]>),
      );
      const body = forwardLines(score, '  ', overrides);
      const resultOf = (n: number) => cast(`v${n}`, score.program.types[n], 'float');
      out.push(
        `__device__ __forceinline__ float attnlab_score_mod_folded(float s, ${signature}) {`,
        unused,
        ...(scales.output === null ? body : body.slice(0, -1)),
        `  return ${resultOf(scales.outArg)};`,
        '}',
      );
    }
    out.push(
      `// scoreMod ${score.label}`,
      `__device__ __forceinline__ float attnlab_score_mod(float s, ${signature}) {`,
      unused,
      ...lines,
      `  return ${cast(result, resultType, 'float')};`,
      '}',
      `__device__ __forceinline__ float attnlab_score_mod_backward(float s, float g, ${signature}) {`,
      unused,
      ...lines,
      `  (void)${result};`,
      ...backwardLines(score, learned, '  '),
      '  return ds;',
      '}',
      // y = attnlab_score_mod(s, …); defined (as g) when ATTNLAB_SCORE_MOD_GRAD_FROM_OUTPUT is 0 too.
      `__device__ __forceinline__ float attnlab_score_mod_backward_from_output(float y, float g, ${signature}) {`,
      unused,
      ...(fromOutput ?? ['  (void)y;', '  const float ds = g;']),
      '  return ds;',
      '}',
    );
  } else {
    out.push(
      `__device__ __forceinline__ float attnlab_score_mod(float s, ${signature}) { return s; }`,
      `__device__ __forceinline__ float attnlab_score_mod_backward(float s, float g, ${signature}) { return g; }`,
      `__device__ __forceinline__ float attnlab_score_mod_backward_from_output(float y, float g, ${signature}) { return g; }`,
    );
  }
  if (mask) {
    out.push(
      `// maskMod ${mask.label}`,
      `__device__ __forceinline__ bool attnlab_mask_mod(${signature}) {`,
      unused,
      ...forwardLines(mask, '  '),
      `  return v${mask.program.instrs.length - 1};`,
      '}',
    );
  } else {
    out.push(`__device__ __forceinline__ bool attnlab_mask_mod(${signature}) { return true; }`);
  }
  return `${out.join('\n')}\n`;
}

/**
 * Helpers the generated functions call. tanh is the hardware's tanh.approx.f32 (MUFU.TANH, one
 * instruction; relative error ≤ 2^-10.987, PTX ISA) in kernels that define ATTNLAB_FAST_TANH (the
 * Hopper forward: bf16/fp16 only), libm's tanhf elsewhere (float32 kernels and the oracle checks):
 * tanhf is ~20 instructions with two MUFU operations and a branch per score, and soft-capping ran at
 * 0.28× the unmodified kernel with it; c·tanh(s/c) is within c·2^-11 of the exact value with the
 * approximation, under the bf16 rounding of the scores it caps (|s|·2^-9). attnlab_small_i2f converts an int the kernel's position bound keeps inside ±2^22
 * (intRanges: kv − q, q + 5) with an integer add and a float subtract: the int's bits land in the
 * mantissa of 1.5·2^23 (exact below 2^22); kernels that do not guarantee q, kv < 2^22 leave
 * ATTNLAB_POSITIONS_BELOW_2_22 at 0 and convert with I2F.
 */
const HELPERS = [
  '#ifndef ATTNLAB_POSITIONS_BELOW_2_22',
  '#define ATTNLAB_POSITIONS_BELOW_2_22 0',
  '#endif',
  '#ifndef ATTNLAB_FAST_TANH',
  '#define ATTNLAB_FAST_TANH 0',
  '#endif',
  '#ifndef ATTNLAB_MODIFIER_HELPERS',
  '#define ATTNLAB_MODIFIER_HELPERS',
  '__device__ __forceinline__ float attnlab_tanh(float x) {',
  '#if ATTNLAB_FAST_TANH',
  '  float y;',
  '  asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));',
  '  return y;',
  '#else',
  '  return tanhf(x);',
  '#endif',
  '}',
  '__device__ __forceinline__ float attnlab_small_i2f(int x) {',
  '#if ATTNLAB_POSITIONS_BELOW_2_22',
  '  return __int_as_float(0x4b400000 + x) - 12582912.0f;',
  '#else',
  '  return (float)x;',
  '#endif',
  '}',
  '#endif',
];

/** The captures parameter; guarded so that a kernel source that also declares it compiles once. */
export const CAPTURES_STRUCT = `#ifndef ATTNLAB_CAPTURES_STRUCT
#define ATTNLAB_CAPTURES_STRUCT
struct AttnlabCaptures {
  const void* ptr[${MAX_CAPTURES}];
  long long stride[${MAX_CAPTURES}][${MAX_CAPTURE_RANK}];
  float* grad[${MAX_CAPTURES}];
};
#endif`;

/** The block-mask parameter and its switch, prepended after the modifiers' source when a block mask is given. */
export function blockMaskSource(enabled: boolean): string {
  return `#define ATTNLAB_BLOCK_MASK ${enabled ? 1 : 0}
#ifndef ATTNLAB_BLOCK_MASK_STRUCT
#define ATTNLAB_BLOCK_MASK_STRUCT
struct AttnlabBlockMask {
  const unsigned char* kinds;  // [Bm][Nm][n_qblocks][n_kvblocks]: 0 empty, 1 partial, 2 full
  long long stride_b, stride_h;  // 0 where the mask does not depend on b (h)
  int block_q, block_kv, n_qblocks, n_kvblocks;
};
#endif
`;
}
