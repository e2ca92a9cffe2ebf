/**
 * The one validation step: (query, key, value, options) → AttentionProblem, or a typed error that names
 * the argument, what was expected and what came. Backends trust what comes out of here.
 */

import {
  checkBoolean,
  checkChoice,
  checkKeys,
  checkOptionsObject,
  checkScale,
  describeValue,
} from '../arguments.js';
import {
  type AttentionOptions,
  type AttentionProblem,
  type BroadcastOperand,
  IMPLEMENTATIONS,
  type Implementation,
} from '../backends/problem.js';
import { InvalidArgumentError } from '../errors.js';
import { isFloatDType } from '../tensor/dtype.js';
import { checkTensor, type Tensor } from '../tensor/tensor.js';
import { checkModifiers } from '../variants/check.js';
import { checkLengths, LAYOUT_OPTIONS, layoutOf } from './kv-layout.js';

const shapeText = (t: Tensor): string => `[${t.shape.join(', ')}]`;

function checkBroadcast(
  argument: string,
  tensor: Tensor,
  batched: boolean,
  target: readonly [number, number, number, number],
): BroadcastOperand {
  const rank = batched ? 4 : 3;
  const letters = batched ? '(B,N,T,S)' : '(N,T,S)';
  const want = `rank ${rank}, broadcastable to ${letters} = [${target.slice(batched ? 0 : 1).join(', ')}]`;
  if (tensor.rank !== rank)
    throw new InvalidArgumentError(argument, want, `rank ${tensor.rank} ${shapeText(tensor)}`);
  const shape = batched ? tensor.shape : [1, ...tensor.shape];
  const strides: [number, number, number, number] = [0, 0, 0, 0];
  let stride = 1;
  for (let d = 3; d >= 0; d--) {
    if (shape[d] !== target[d] && shape[d] !== 1)
      throw new InvalidArgumentError(argument, want, shapeText(tensor));
    strides[d] = shape[d] === 1 ? 0 : stride;
    stride *= shape[d];
  }
  return { tensor, strides };
}

function checkWindow(value: AttentionOptions['localWindowSize']): AttentionProblem['window'] {
  if (value === undefined || value === null) return null;
  const isBound = (v: unknown): v is number => (Number.isInteger(v) && (v as number) >= 0) || v === Infinity;
  if (typeof value === 'number') {
    if (!isBound(value))
      throw new InvalidArgumentError('localWindowSize', 'a non-negative integer', describeValue(value));
    return { left: value, right: value };
  }
  if (!Array.isArray(value) || value.length !== 2 || !isBound(value[0]) || !isBound(value[1])) {
    throw new InvalidArgumentError(
      'localWindowSize',
      'a non-negative integer or [left, right] of non-negative integers (Infinity for unbounded)',
      describeValue(value),
    );
  }
  return { left: value[0], right: value[1] };
}

export const ATTENTION_OPTION_KEYS: readonly string[] = [
  'bias',
  'mask',
  'scale',
  'isCausal',
  'causalAlignment',
  'querySeqLengths',
  'keyValueSeqLengths',
  'localWindowSize',
  'implementation',
  'float32Precision',
  'returnLogSumExp',
  'scoreMod',
  'maskMod',
  'blockMask',
  ...LAYOUT_OPTIONS,
];

/** Names users bring from jax.nn.dot_product_attention and torch's scaled_dot_product_attention. */
export const ATTENTION_OPTION_ALIASES: Readonly<Record<string, string>> = {
  is_causal: 'isCausal',
  attn_mask: 'mask',
  query_seq_lengths: 'querySeqLengths',
  key_value_seq_lengths: 'keyValueSeqLengths',
  local_window_size: 'localWindowSize',
  window_size: 'localWindowSize',
  softmax_scale: 'scale',
  causal: 'isCausal',
  backend: 'implementation',
  return_lse: 'returnLogSumExp',
  returnLse: 'returnLogSumExp',
  score_mod: 'scoreMod',
  mask_mod: 'maskMod',
  block_mask: 'blockMask',
};

const NO_MODIFIERS: ReturnType<typeof checkModifiers> = Object.freeze({});

export function validateAttention(
  queryIn: unknown,
  keyIn: unknown,
  valueIn: unknown,
  optionsIn?: AttentionOptions,
): AttentionProblem {
  const options = checkOptionsObject<AttentionOptions>(
    'options',
    optionsIn,
    'an object of attention options (or undefined)',
  );
  checkKeys('options', options, ATTENTION_OPTION_KEYS, ATTENTION_OPTION_ALIASES);
  const layout = layoutOf(
    checkTensor('query', queryIn),
    checkTensor('key', keyIn),
    checkTensor('value', valueIn),
    options,
  );
  const { q, k, v } = layout;
  // Indexed, not destructured: array destructuring runs the iterator protocol (~480 B a call).
  const { query: qs, key: ks, value: vs } = layout.sizes;
  const B = qs[0];
  const T = qs[1];
  const N = qs[2];
  const H = qs[3];
  const kB = ks[0];
  const S = ks[1];
  const K = ks[2];
  const kH = ks[3];
  const vB = vs[0];
  const vS = vs[1];
  const vK = vs[2];
  const Hv = vs[3];
  const dtype = q.tensor.dtype;
  if (!isFloatDType(dtype)) throw new InvalidArgumentError('query.dtype', 'a floating-point dtype', dtype);
  // Unrolled, as below: a loop over [name, tensor] pairs made 4 arrays and an iterator a call.
  if (k.tensor.dtype !== dtype)
    throw new InvalidArgumentError('key.dtype', `${dtype} (the query's dtype)`, k.tensor.dtype);
  if (v.tensor.dtype !== dtype)
    throw new InvalidArgumentError('value.dtype', `${dtype} (the query's dtype)`, v.tensor.dtype);
  const device = q.tensor.device;
  if (k.tensor.device !== device)
    throw new InvalidArgumentError('key.device', `${device} (the query's)`, k.tensor.device);
  if (v.tensor.device !== device)
    throw new InvalidArgumentError('value.device', `${device} (the query's)`, v.tensor.device);
  if (kB !== B)
    throw new InvalidArgumentError('key', `batch B=${B} as in query`, `${kB} in ${shapeText(k.tensor)}`);
  if (kH !== H)
    throw new InvalidArgumentError('key', `head dim H=${H} as in query`, `${kH} in ${shapeText(k.tensor)}`);
  if (vB !== B || vS !== S || vK !== K) {
    throw new InvalidArgumentError('value', `(B,S,K,Hv) with B=${B}, S=${S}, K=${K}`, shapeText(v.tensor));
  }
  if (T === 0 || S === 0 || N === 0 || K === 0 || H === 0 || Hv === 0 || B === 0) {
    const letter =
      T === 0 ? 'T' : S === 0 ? 'S' : N === 0 ? 'N' : K === 0 ? 'K' : H === 0 ? 'H' : Hv === 0 ? 'Hv' : 'B';
    throw new InvalidArgumentError(letter, 'a size of at least 1', '0');
  }
  if (N % K !== 0) {
    throw new InvalidArgumentError('key', `K dividing N (query heads N=${N})`, `K=${K} (N % K = ${N % K})`);
  }

  let bias: BroadcastOperand | null = null;
  if (options.bias !== undefined) {
    const t = checkTensor('bias', options.bias);
    if (!isFloatDType(t.dtype))
      throw new InvalidArgumentError('bias.dtype', 'a floating-point dtype', t.dtype);
    if (t.device !== device) throw new InvalidArgumentError('bias.device', device, t.device);
    bias = checkBroadcast('bias', t, q.batched, [B, N, T, S]);
  }
  let mask: BroadcastOperand | null = null;
  if (options.mask !== undefined) {
    const t = checkTensor('mask', options.mask);
    if (t.dtype !== 'bool') throw new InvalidArgumentError('mask.dtype', 'bool (true keeps)', t.dtype);
    if (t.device !== device) throw new InvalidArgumentError('mask.device', device, t.device);
    mask = checkBroadcast('mask', t, q.batched, [B, N, T, S]);
  }
  const scale = checkScale('scale', options.scale, 1 / Math.sqrt(H));
  const causal = checkBoolean('isCausal', options.isCausal, false);
  const returnLogSumExp = checkBoolean('returnLogSumExp', options.returnLogSumExp, false);
  const alignment =
    options.causalAlignment === undefined
      ? 'top_left'
      : checkChoice('causalAlignment', options.causalAlignment, ['top_left', 'bottom_right'] as const);
  const implementation =
    options.implementation === undefined
      ? undefined
      : checkChoice<Implementation>('implementation', options.implementation, IMPLEMENTATIONS);
  const precision =
    options.float32Precision === undefined
      ? 'highest'
      : checkChoice('float32Precision', options.float32Precision, ['highest', 'tf32'] as const);
  // Most calls name no modifier: nothing to check, and no sizes object or rest copy made for them.
  const { builtin, ...variants } =
    options.scoreMod === undefined && options.maskMod === undefined && options.blockMask === undefined
      ? NO_MODIFIERS
      : checkModifiers(options, { B, N, T, S }, device, alignment);
  // causal() and slidingWindow() as maskMod are the built-in masks in top-left alignment: run as those.
  let window = checkWindow(options.localWindowSize);
  if (builtin && builtin.left !== Number.POSITIVE_INFINITY) {
    window = window
      ? { left: Math.min(window.left, builtin.left), right: Math.min(window.right, builtin.right) }
      : { left: builtin.left, right: builtin.right };
  }
  // The fixed fields first and the variants' (modifiers, blockMask: usually none) after: with the spread
  // first, V8 grew the object's property store field by field (~1.2 KB of allocation a call).
  return {
    B,
    T,
    S,
    N,
    K,
    H,
    Hv,
    dtype,
    device,
    query: q.tensor,
    key: k.tensor,
    value: v.tensor,
    bias,
    mask,
    scale,
    causal: causal || (builtin?.right === 0 && builtin.left === Number.POSITIVE_INFINITY),
    alignment,
    window,
    querySeqLengths:
      layout.querySeqLengths ?? checkLengths('querySeqLengths', options.querySeqLengths, B, T, 'T'),
    keyValueSeqLengths:
      layout.keyValueSeqLengths ?? checkLengths('keyValueSeqLengths', options.keyValueSeqLengths, B, S, 'S'),
    paged: layout.paged,
    packed: layout.packed,
    returnLogSumExp,
    float32Precision: precision,
    batched: layout.batched,
    implementation,
    ...variants,
  };
}
