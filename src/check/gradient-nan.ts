/**
 * The NaN rule for gradients as data (docs/guide/gradient-accuracy.md, "NaN and Inf"): NaN propagates
 * to exactly the gradients whose forward it reached. Each case of the forward's NaN suite
 * (nan-cases.ts), plus cases of an infinite query element — PyTorch's and JAX's "+inf in the query"
 * tests — under causality, a boolean mask and a bias, is run backward; every gradient element must
 * be NaN, +inf, −inf or finite exactly as the float64 reference's of the same inputs, and the finite
 * ones must be close to the reference's.
 */
import type { FloatDType } from '../tensor/dtype.js';
import { randomNormal } from '../tensor/random.js';
import { ABSOLUTE_TOLERANCE } from './accuracy.js';
import type { BackwardInputs, GradientValues } from './gradients.js';
import { buildNanInputs, NAN_CASES, type NanCase } from './nan-cases.js';

const INF = Number.POSITIVE_INFINITY;
const shape = { B: 2, T: 80, S: 150, N: 4, K: 2, H: 64 };

/**
 * +inf in one query element: the row's logits are ±inf, its forward output NaN, and so are its dQ and
 * dK, dV, dBias at every key the row sees (−inf logits included); keys the boolean mask, causality or
 * the lengths take away stay finite.
 */
const INFINITE_QUERY_CASES: readonly NanCase[] = [
  {
    name: '+inf in one query element, causal: dK, dV of the 31 keys row 30 sees',
    shape,
    options: { isCausal: true },
    poison: [{ operand: 'q', at: [0, 30, 1, 5], value: INF }],
    nanRow: (b, i, n) => b === 0 && i === 30 && n === 1,
  },
  {
    name: '+inf in one query element under a boolean mask: the masked keys stay out',
    shape,
    masked: (_b, i, j) => (i + j) % 3 === 0,
    poison: [{ operand: 'q', at: [1, 20, 2, 0], value: INF }],
    nanRow: (b, i, n) => b === 1 && i === 20 && n === 2,
  },
  {
    name: '+inf in one query element with a bias (a −inf entry in its row): dBias along the row',
    shape,
    bias: true,
    biasEdits: [{ at: [0, 3, 12, 40], value: -INF }],
    poison: [{ operand: 'q', at: [0, 12, 3, 9], value: INF }],
    nanRow: (b, i, n) => b === 0 && i === 12 && n === 3,
  },
  {
    name: '+inf in one query element, padded keys and rows: the padding stays out',
    shape,
    options: { isCausal: true, causalAlignment: 'bottom_right', keyValueSeqLengths: [150, 90] },
    poison: [{ operand: 'q', at: [1, 70, 0, 4], value: INF }],
    nanRow: (b, i, n) => b === 1 && i === 70 && n === 0,
  },
];

export const GRADIENT_NAN_CASES: readonly NanCase[] = [...INFINITE_QUERY_CASES, ...NAN_CASES];

/** The poisoned inputs of `c` in `dtype` and a seeded incoming gradient dO. */
export function gradientNanInputs(c: NanCase, dtype: FloatDType, seed: number): BackwardInputs {
  const { q, k, v, options } = buildNanInputs(c, dtype, seed, true);
  const dO = randomNormal([...q.shape.slice(0, -1), v.shape[v.rank - 1]], { seed: seed + 5, dtype });
  return { q, k, v, options, dO };
}

const kind = (x: number) => (Number.isNaN(x) ? 'NaN' : x === INF ? '+inf' : x === -INF ? '−inf' : 'finite');

export interface GradientNanComparison {
  readonly ok: boolean;
  readonly message: string;
}

/**
 * Each gradient of `actual` against `reference`: the same kind (NaN, ±inf, finite) at every element,
 * and the finite elements within ABSOLUTE_TOLERANCE × 8 × max(1, max|finite reference|) — loose, as the
 * gradient suite judges accuracy; this catches values zeroed or masked where the rule keeps them.
 */
export function compareGradientNan(
  actual: GradientValues,
  reference: GradientValues,
  precision: FloatDType,
): GradientNanComparison {
  const problems: string[] = [];
  let count = 0;
  for (const gradient of ['dQuery', 'dKey', 'dValue', 'dBias'] as const) {
    const want = reference[gradient];
    if (!want) continue;
    const got = actual[gradient];
    if (!got) {
      problems.push(`${gradient} missing`);
      count++;
      continue;
    }
    let magnitude = 1;
    let nan = 0;
    for (const x of want) {
      if (Number.isFinite(x)) magnitude = Math.max(magnitude, Math.abs(x));
      else nan++;
    }
    const tolerance = 8 * ABSOLUTE_TOLERANCE[precision] * magnitude;
    let wrong = 0;
    let first = '';
    for (let e = 0; e < want.length; e++) {
      const [a, w] = [got[e], want[e]];
      const bad = kind(a) !== kind(w) || (Number.isFinite(w) && !(Math.abs(a - w) <= tolerance));
      if (!bad) continue;
      if (wrong++ === 0)
        first = `[${e}] = ${a}, expected ${w}${Number.isFinite(w) ? ` (±${tolerance.toExponential(1)})` : ''}`;
    }
    if (wrong > 0) {
      count += wrong;
      problems.push(
        `${gradient}: ${wrong} of ${want.length} elements differ (${nan} non-finite expected), first ${first}`,
      );
    }
  }
  return { ok: count === 0, message: count === 0 ? 'ok' : problems.join('; ') };
}
