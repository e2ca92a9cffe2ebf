/**
 * NaN and Inf cases: the rule of docs/guide/attention.md ("Rows that see nothing, NaN and Inf") as data, run for every
 * backend. Each case is a clean random problem plus a few poisoned entries, and says which output
 * rows and elements the poison must reach: a NaN (or +inf) logit makes its row NaN, a NaN value entry
 * its output element, and a poisoned entry behind a mask, a −inf bias, padding or the window reaches
 * nothing. Everything not predicted NaN must equal the result of the clean inputs (the poisoned
 * entries set to 0), within the backend's tolerance.
 *
 * Shapes span several of the CUDA flash kernel's tiles (64 or 128 keys, 128 query rows per block) so
 * that poison sits in diagonal, boundary and inner tiles alike.
 */
import type { AttentionOptions } from '../backends/problem.js';
import type { FloatDType } from '../tensor/dtype.js';
import { randomNormal } from '../tensor/random.js';
import { Tensor } from '../tensor/tensor.js';

type Operand = 'q' | 'k' | 'v' | 'bias';

/** One poisoned entry; a `null` coordinate spans its whole axis. */
export interface Poison {
  readonly operand: Operand;
  readonly at: readonly (number | null)[];
  readonly value: number;
}

export interface NanCase {
  readonly name: string;
  /** q (B,T,N,H), k (B,S,K,H), v (B,S,K,Hv); K divides N, query head n reads KV head n / (N/K). */
  readonly shape: { B: number; T: number; S: number; N: number; K: number; H: number };
  readonly options?: Omit<AttentionOptions, 'bias' | 'mask' | 'implementation'>;
  /** A full (B,N,T,S) bias: random, then `biasEdits` (part of the clean problem, e.g. −inf). */
  readonly bias?: boolean;
  readonly biasEdits?: readonly { at: readonly (number | null)[]; value: number }[];
  /** A (B,1,T,S) mask: true except where `masked(b, i, j)`. */
  readonly masked?: (b: number, i: number, j: number) => boolean;
  readonly poison: readonly Poison[];
  /** Rows (b, i, n) whose whole output and log-sum-exp must be NaN. */
  readonly nanRow?: (b: number, i: number, n: number) => boolean;
  /** Further output elements (b, i, n, h) that must be NaN. */
  readonly nanElement?: (b: number, i: number, n: number, h: number) => boolean;
  /** Output elements that must be +inf (a visible +inf value with a weight that does not underflow). */
  readonly infElement?: (b: number, i: number, n: number, h: number) => boolean;
  /** Rows that see no key: zeros and log-sum-exp −inf. */
  readonly emptyRow?: (b: number, i: number, n: number) => boolean;
}

const shape = { B: 2, T: 80, S: 150, N: 4, K: 2, H: 64 };
const headOf = (n: number) => Math.floor(n / (shape.N / shape.K));
const NAN = Number.NaN;
const INF = Number.POSITIVE_INFINITY;

export const NAN_CASES: readonly NanCase[] = [
  {
    name: 'NaN in one query element: that row',
    shape,
    poison: [{ operand: 'q', at: [1, 5, 2, 3], value: NAN }],
    nanRow: (b, i, n) => b === 1 && i === 5 && n === 2,
  },
  {
    name: '+inf in one query element: that row (PyTorch test case)',
    shape,
    poison: [{ operand: 'q', at: [0, 7, 1, 0], value: INF }],
    nanRow: (b, i, n) => b === 0 && i === 7 && n === 1,
  },
  {
    name: 'NaN query row, causal',
    shape,
    options: { isCausal: true },
    poison: [{ operand: 'q', at: [0, 70, 3, null], value: NAN }],
    nanRow: (b, i, n) => b === 0 && i === 70 && n === 3,
  },
  {
    name: 'NaN key, causal: the rows that see it',
    shape,
    options: { isCausal: true },
    poison: [{ operand: 'k', at: [1, 40, 0, 5], value: NAN }],
    nanRow: (b, i, n) => b === 1 && i >= 40 && headOf(n) === 0,
  },
  {
    name: 'all keys NaN in one batch',
    shape,
    poison: [{ operand: 'k', at: [0, null, null, null], value: NAN }],
    nanRow: (b) => b === 0,
  },
  {
    name: 'NaN value element, causal: that element of the rows that see it',
    shape,
    options: { isCausal: true },
    poison: [{ operand: 'v', at: [0, 30, 1, 7], value: NAN }],
    nanElement: (b, i, n, h) => b === 0 && i >= 30 && headOf(n) === 1 && h === 7,
  },
  {
    name: 'NaN value row behind the causal diagonal stays out of earlier rows',
    shape,
    options: { isCausal: true },
    poison: [{ operand: 'v', at: [1, 50, 0, null], value: NAN }],
    nanElement: (b, i, n) => b === 1 && i >= 50 && headOf(n) === 0,
  },
  {
    name: 'NaN key behind the causal diagonal stays out of earlier rows',
    shape,
    options: { isCausal: true },
    poison: [{ operand: 'k', at: [0, 70, 1, null], value: NAN }],
    nanRow: (b, i, n) => b === 0 && i >= 70 && headOf(n) === 1,
  },
  {
    name: 'NaN bias entry: that row',
    shape,
    bias: true,
    poison: [{ operand: 'bias', at: [0, 3, 10, 20], value: NAN }],
    nanRow: (b, i, n) => b === 0 && i === 10 && n === 3,
  },
  {
    name: '+inf bias entry: that row',
    shape,
    bias: true,
    poison: [{ operand: 'bias', at: [1, 0, 11, 3], value: INF }],
    nanRow: (b, i, n) => b === 1 && i === 11 && n === 0,
  },
  {
    name: '−inf bias masks: NaN values there stay out; a row of −inf sees nothing',
    shape,
    bias: true,
    biasEdits: [
      { at: [0, null, null, 17], value: -INF },
      { at: [1, 1, 3, null], value: -INF },
    ],
    poison: [{ operand: 'v', at: [0, 17, null, null], value: NAN }],
    emptyRow: (b, i, n) => b === 1 && i === 3 && n === 1,
  },
  {
    // NaN + (−inf) is NaN: a −inf bias hides a key's value, not a NaN in its logit.
    name: 'NaN key under a −inf bias: the logit is NaN, so the rows are NaN',
    shape,
    bias: true,
    biasEdits: [{ at: [1, null, null, 44], value: -INF }],
    poison: [{ operand: 'k', at: [1, 44, 0, 9], value: NAN }],
    nanRow: (b, _i, n) => b === 1 && headOf(n) === 0,
  },
  {
    name: 'visible NaN value whose weight underflows is still NaN (0 · NaN)',
    shape,
    bias: true,
    biasEdits: [{ at: [0, 0, null, 3], value: -1e4 }],
    poison: [{ operand: 'v', at: [0, 3, 0, 2], value: NAN }],
    nanElement: (b, _i, n, h) => b === 0 && headOf(n) === 0 && h === 2,
  },
  {
    name: '+inf value entry: +inf in that element of every row',
    shape,
    poison: [{ operand: 'v', at: [0, 10, 0, 1], value: INF }],
    infElement: (b, _i, n, h) => b === 0 && headOf(n) === 0 && h === 1,
  },
  {
    name: 'NaN in padded keys, values and query rows stays out',
    shape,
    options: { querySeqLengths: [80, 60], keyValueSeqLengths: [150, 100] },
    poison: [
      { operand: 'k', at: [1, 120, null, null], value: NAN },
      { operand: 'v', at: [1, 130, null, null], value: NAN },
      { operand: 'v', at: [1, 100, 1, null], value: NAN },
      { operand: 'q', at: [1, 70, null, null], value: NAN },
    ],
  },
  {
    name: 'NaN in padded keys and values stays out, causal bottom-right',
    shape,
    options: { isCausal: true, causalAlignment: 'bottom_right', keyValueSeqLengths: [150, 90] },
    poison: [
      { operand: 'k', at: [1, 95, null, null], value: NAN },
      { operand: 'v', at: [1, 140, null, null], value: NAN },
    ],
  },
  {
    name: 'NaN behind a boolean mask stays out; rows that keep the key get NaN',
    shape,
    masked: (b, i, j) => (b === 0 && j === 33) || (b === 1 && j === 34 && i % 2 === 0),
    poison: [
      { operand: 'k', at: [0, 33, null, null], value: NAN },
      { operand: 'v', at: [0, 33, null, null], value: NAN },
      { operand: 'v', at: [1, 34, 1, null], value: NAN },
    ],
    nanElement: (b, i, n) => b === 1 && i % 2 === 1 && headOf(n) === 1,
  },
  {
    name: 'NaN outside the local window stays out',
    shape,
    options: { localWindowSize: [10, 0] },
    poison: [
      { operand: 'v', at: [0, 5, 0, null], value: NAN },
      { operand: 'k', at: [1, 60, 1, null], value: NAN },
    ],
    nanElement: (b, i, n) => b === 0 && i >= 5 && i <= 15 && headOf(n) === 0,
    nanRow: (b, i, n) => b === 1 && i >= 60 && i <= 70 && headOf(n) === 1,
  },
];

/**
 * The cases at T = S = 256, for the FP8 path: cuDNN's FP8 graph was verified on the H200 at
 * sequence lengths that are multiples of 64 (cudnn-sdpa-verified.md §7). Every prediction above
 * still holds there (they name rows, keys and lengths below 150); the FP8 path refuses the cases
 * with a bias, a mask or a window, and bottom-right causal with padding.
 */
export const FP8_NAN_CASES: readonly NanCase[] = NAN_CASES.map((c) => ({
  ...c,
  shape: { ...c.shape, T: 256, S: 256 },
}));

/** Whether a case poisons with +inf or −inf (which e4m3 saturates to ±448 on the FP8 path). */
export function poisonsWithInf(c: NanCase): boolean {
  return c.poison.some((p) => Math.abs(p.value) === Number.POSITIVE_INFINITY);
}

function fill(t: Float64Array, dims: readonly number[], at: readonly (number | null)[], value: number): void {
  const walk = (axis: number, offset: number) => {
    if (axis === dims.length) {
      t[offset] = value;
      return;
    }
    const c = at[axis];
    const stride = dims.slice(axis + 1).reduce((a, b) => a * b, 1);
    if (c !== null) walk(axis + 1, offset + c * stride);
    else for (let x = 0; x < dims[axis]; x++) walk(axis + 1, offset + x * stride);
  };
  walk(0, 0);
}

export interface NanInputs {
  q: Tensor;
  k: Tensor;
  v: Tensor;
  options: AttentionOptions;
}

/**
 * The case's inputs in `dtype`: `poisoned` true gives the poisoned problem, false the clean one
 * (poisoned entries 0). Both share every other value.
 */
export function buildNanInputs(c: NanCase, dtype: FloatDType, seed: number, poisoned: boolean): NanInputs {
  const { B, T, S, N, K, H } = c.shape;
  const dims: Record<Operand, number[]> = {
    q: [B, T, N, H],
    k: [B, S, K, H],
    v: [B, S, K, H],
    bias: [B, N, T, S],
  };
  const values: Record<Operand, Float64Array> = {
    q: randomNormal(dims.q, { seed, dtype }).toFloat64Array(),
    k: randomNormal(dims.k, { seed: seed + 1, dtype }).toFloat64Array(),
    v: randomNormal(dims.v, { seed: seed + 2, dtype }).toFloat64Array(),
    bias: c.bias ? randomNormal(dims.bias, { seed: seed + 3, dtype }).toFloat64Array() : new Float64Array(0),
  };
  for (const e of c.biasEdits ?? []) fill(values.bias, dims.bias, e.at, e.value);
  for (const p of c.poison) fill(values[p.operand], dims[p.operand], p.at, poisoned ? p.value : 0);
  const make = (o: Operand) => Tensor.fromArray(values[o], dims[o], dtype);
  const options: AttentionOptions = { ...c.options };
  if (c.bias) options.bias = make('bias');
  if (c.masked) {
    const bits = new Uint8Array(B * T * S);
    for (let b = 0; b < B; b++)
      for (let i = 0; i < T; i++)
        for (let j = 0; j < S; j++) bits[(b * T + i) * S + j] = c.masked(b, i, j) ? 0 : 1;
    options.mask = Tensor.fromRaw(bits, [B, 1, T, S], 'bool');
  }
  return { q: make('q'), k: make('k'), v: make('v'), options };
}
