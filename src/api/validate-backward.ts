/**
 * Validation of the backward pass: the forward's one validation step (validate.ts) for query, key,
 * value and options, then the residuals (output, logSumExp) and the incoming gradient dOutput —
 * shapes in the letters, dtypes and devices — each error naming the argument.
 */

import { checkBoolean, checkOptionsObject } from '../arguments.js';
import type { BackwardOptions, BackwardProblem } from '../backends/backward-problem.js';
import type { AttentionOptions, AttentionProblem } from '../backends/problem.js';
import { InvalidArgumentError, UnsupportedError } from '../errors.js';
import { checkTensor, type Tensor } from '../tensor/tensor.js';
import { validateAttention } from './validate.js';

const shapeText = (shape: readonly number[]): string => `[${shape.join(', ')}]`;

/** `value` as a live Tensor of `want` shape (unbatched callers pass it without B) on the problem's device. */
function checkResidual(
  argument: string,
  value: unknown,
  p: AttentionProblem,
  letters: string,
  want: readonly number[],
  dtypes: readonly string[],
): Tensor {
  const tensor = checkTensor(argument, value);
  const expected = p.batched ? want : want.slice(1);
  const shown = p.batched ? letters : `(${letters.slice(3)}`;
  // A loop, not shape.some(callback): under tsx each closure made costs a defineProperty of its name, three a call.
  let same = tensor.rank === expected.length;
  for (let i = 0; same && i < expected.length; i++) same = tensor.shape[i] === expected[i];
  if (!same) {
    throw new InvalidArgumentError(
      argument,
      `shape ${shown} = ${shapeText(expected)}`,
      shapeText(tensor.shape),
    );
  }
  if (!dtypes.includes(tensor.dtype))
    throw new InvalidArgumentError(`${argument}.dtype`, dtypes.join(' or '), tensor.dtype);
  if (tensor.device !== p.device)
    throw new InvalidArgumentError(`${argument}.device`, `${p.device} (the query's)`, tensor.device);
  return p.batched ? tensor : tensor.reshape(want);
}

export const OPTIONS_EXPECTED =
  'an object of attention options, `deterministic` and `float32Output` (or undefined)';

/** Splits off `deterministic` and `float32Output` (checked) from the forward's options, which validate.ts checks. */
export function splitBackwardOptions(options: BackwardOptions): {
  deterministic: boolean;
  float32Output: boolean;
  forwardOptions: AttentionOptions;
} {
  const { deterministic, float32Output, ...forwardOptions } = checkOptionsObject<BackwardOptions>(
    'options',
    options,
    OPTIONS_EXPECTED,
  );
  // checkBoolean says what came: String() made the string 'true' read "got true".
  return {
    deterministic: checkBoolean('deterministic', deterministic, false),
    float32Output: checkBoolean('float32Output', float32Output, false),
    forwardOptions,
  };
}

/** `p` where the backward can take its layout (dense); a paged cache or packed sequences are refused, saying which. */
export function denseForBackward(p: AttentionProblem): AttentionProblem {
  if (p.paged || p.packed) {
    const layout = p.paged
      ? 'a paged KV cache (blockTable)'
      : 'packed sequences (querySeqOffsets/keyValueSeqOffsets)';
    throw new UnsupportedError('every backend backward', `${layout}: the backward takes dense inputs only`);
  }
  return p;
}

export function validateBackward(
  query: unknown,
  key: unknown,
  value: unknown,
  output: unknown,
  logSumExp: unknown,
  dOutput: unknown,
  options: BackwardOptions = {},
): BackwardProblem {
  const { deterministic, float32Output, forwardOptions } = splitBackwardOptions(options);
  if (float32Output) {
    throw new InvalidArgumentError(
      'options.float32Output',
      'attentionVjp only (attentionBackward takes the float32 output as `output`)',
      'true',
    );
  }
  const p = denseForBackward(validateAttention(query, key, value, forwardOptions));
  const { B, T, N, Hv } = p;
  const rows = [B, T, N, Hv];
  const own = [p.dtype];
  // A float32 output beside 16-bit inputs: the unrounded output, D = rowsum(dO∘O) taken from it.
  const outputs = p.dtype === 'bfloat16' || p.dtype === 'float16' ? [p.dtype, 'float32'] : own;
  // The residuals first, then the forward problem spread (which has none of these four fields): a literal
  // that spreads first and adds after leaves V8's fast clone, ~10 µs for the problem's 26 fields against
  // ~0.5 µs this way round on the build machine, and Object.assign makes a dictionary-mode object.
  return {
    output: checkResidual('output', output, p, '(B,T,N,Hv)', rows, outputs),
    // float64 keeps the CPU backends exact; the GPU backends take float32 (and say so if not).
    logSumExp: checkResidual('logSumExp', logSumExp, p, '(B,T,N)', [B, T, N], ['float32', 'float64']),
    dOutput: checkResidual('dOutput', dOutput, p, '(B,T,N,Hv)', rows, own),
    deterministic,
    ...p,
  };
}
