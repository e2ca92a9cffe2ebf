/**
 * TE's DotProductAttention configuration and its mapping onto dotProductAttention's options.
 *
 * Mask types (TE's AttnMaskType values):
 *   no_mask                      nothing
 *   padding                      querySeqLengths / keyValueSeqLengths from the sequence descriptor
 *   causal                       isCausal, diagonal top-left (query i sees keys j ≤ i)
 *   padding_causal               both
 *   causal_bottom_right          isCausal with causalAlignment 'bottom_right' (j ≤ i + S_b − T_b)
 *   padding_causal_bottom_right  both, the diagonal placed by each batch's valid lengths
 * Bias types: no_bias; post_scale_bias = softmax(scale·QKᵀ + bias), our bias as it is;
 * pre_scale_bias = softmax(scale·(QKᵀ + bias)), our bias multiplied by scale.
 */

import {
  checkBoolean,
  checkChoice,
  checkInteger,
  checkKeys,
  checkOptionsObject,
  checkScale,
  describeValue,
  refuseRevoked,
  snapshot,
} from '../arguments.js';
import type { AttentionOptions } from '../backends/problem.js';
import { InvalidArgumentError } from '../errors.js';
import { checkTensor, Tensor } from '../tensor/tensor.js';
import { type QkvLayout, resolveLayout, type TransposedQkvLayout } from './layout.js';

export type AttnMaskType =
  | 'no_mask'
  | 'padding'
  | 'causal'
  | 'padding_causal'
  | 'causal_bottom_right'
  | 'padding_causal_bottom_right';
export type AttnBiasType = 'no_bias' | 'pre_scale_bias' | 'post_scale_bias';

export const MASK_TYPES: readonly AttnMaskType[] = [
  'no_mask',
  'padding',
  'causal',
  'padding_causal',
  'causal_bottom_right',
  'padding_causal_bottom_right',
];
const BIAS_TYPES: readonly AttnBiasType[] = ['no_bias', 'pre_scale_bias', 'post_scale_bias'];

/** The constructor options, with TE's names in camelCase and TE's defaults. */
export interface DotProductAttentionConfig {
  /** H, or [H, Hv] when values have another head dim. */
  headDim: number | readonly [number, number];
  /** N. */
  numAttentionHeads: number;
  /** K (key/value heads); default N (multi-head attention). */
  numGqaGroups?: number;
  /** Default 'causal', as in TE (dotProductAttention defaults to no mask). */
  attnMaskType?: AttnMaskType;
  /** Default: 'post_scale_bias' when a bias is passed to the call, else 'no_bias' (TE's inference). */
  attnBiasType?: AttnBiasType;
  /** Default 'bshd_bshd_bshd'. */
  qkvLayout?: QkvLayout | TransposedQkvLayout;
  /** Inputs are sequence-first (the sbhd family); default false. */
  transposeBatchSequence?: boolean;
  /** Multiplies Q·Kᵀ; default 1/sqrt(H). */
  scaleFactor?: number;
  /** [left, right] keys around the diagonal, inclusive; a negative bound is unbounded; default none. */
  windowSize?: readonly [number, number] | null;
  /** Dropout rate on the attention weights; only 0 runs (see DotProductAttention.forward). */
  attentionDropout?: number;
}

/** The validated configuration. */
export interface ResolvedConfig {
  readonly H: number;
  readonly Hv: number;
  readonly N: number;
  readonly K: number;
  readonly maskType: AttnMaskType;
  readonly biasType: AttnBiasType | undefined;
  readonly layout: QkvLayout;
  readonly transposed: boolean;
  readonly scale: number;
  readonly window: readonly [number, number] | null;
  readonly dropout: number;
}

/** Sizes reach the kernels as int32 (grid dimensions, strides in elements): 2^31 − 1 is the largest. */
const MAX_SIZE = 2 ** 31 - 1;

const positiveInt = (argument: string, v: unknown): number =>
  checkInteger(argument, v, 1, MAX_SIZE, `a positive integer ≤ 2^31 − 1 (sizes reach the kernels as int32)`);

const CONFIG_KEYS: readonly string[] = [
  'headDim',
  'numAttentionHeads',
  'numGqaGroups',
  'attnMaskType',
  'attnBiasType',
  'qkvLayout',
  'transposeBatchSequence',
  'scaleFactor',
  'windowSize',
  'attentionDropout',
];

/** TE's Python argument names (transformer_engine.pytorch.DotProductAttention, te.jax's) → ours. */
const TE_CONFIG_NAMES: Readonly<Record<string, string>> = {
  kv_channels: 'headDim',
  head_dim: 'headDim',
  num_attention_heads: 'numAttentionHeads',
  num_gqa_groups: 'numGqaGroups',
  attn_mask_type: 'attnMaskType',
  attn_bias_type: 'attnBiasType',
  qkv_layout: 'qkvLayout',
  qkv_format: 'qkvLayout',
  transpose_batch_sequence: 'transposeBatchSequence',
  softmax_scale: 'scaleFactor',
  scale_factor: 'scaleFactor',
  window_size: 'windowSize',
  attention_dropout: 'attentionDropout',
};

export function resolveConfig(configIn: DotProductAttentionConfig): ResolvedConfig {
  if (configIn === undefined) {
    throw new InvalidArgumentError('config', 'an object { headDim, numAttentionHeads, ... }', 'undefined');
  }
  // The module keeps this copy, never the caller's object or its windowSize array.
  const config = checkOptionsObject<DotProductAttentionConfig>(
    'config',
    configIn,
    'an object { headDim, numAttentionHeads, ... }',
  );
  checkKeys('config', config, CONFIG_KEYS, TE_CONFIG_NAMES);
  if (Array.isArray(config.headDim) && config.headDim.length !== 2) {
    throw new InvalidArgumentError('headDim', 'H or [H, Hv]', describeValue(config.headDim));
  }
  const dims = Array.isArray(config.headDim) ? config.headDim : [config.headDim, config.headDim];
  const H = positiveInt('headDim', dims[0]);
  const Hv = positiveInt('headDim[1]', dims[1]);
  const N = positiveInt('numAttentionHeads', config.numAttentionHeads);
  const K = positiveInt('numGqaGroups', config.numGqaGroups ?? N);
  if (N % K !== 0)
    throw new InvalidArgumentError('numGqaGroups', `a divisor of numAttentionHeads=${N}`, String(K));
  const maskType =
    config.attnMaskType === undefined
      ? 'causal'
      : checkChoice('attnMaskType', config.attnMaskType, MASK_TYPES);
  const biasType =
    config.attnBiasType === undefined
      ? undefined
      : checkChoice('attnBiasType', config.attnBiasType, BIAS_TYPES);
  if (config.transposeBatchSequence !== undefined)
    checkBoolean('transposeBatchSequence', config.transposeBatchSequence, false);
  const { layout, transposed } = resolveLayout(
    config.qkvLayout ?? 'bshd_bshd_bshd',
    config.transposeBatchSequence,
  );
  // The packed layouts share an axis (layout.ts): a module whose sizes cannot fit its layout was made, then
  // refused every call naming a key or value the caller never passed. Said here, naming the option.
  const packedName = String(config.qkvLayout);
  if (layout === 'bs3hd' && K !== N) {
    throw new InvalidArgumentError(
      'numGqaGroups',
      `numAttentionHeads=${N} or unset with the packed layout '${packedName}' (Q, K and V share its heads axis)`,
      String(K),
    );
  }
  if (layout !== 'bshd_bshd_bshd' && Hv !== H) {
    throw new InvalidArgumentError(
      'headDim',
      `one head dim with the packed layout '${packedName}' (K and V share its last axis)`,
      describeValue(config.headDim),
    );
  }
  const scale = checkScale('scaleFactor', config.scaleFactor, 1 / Math.sqrt(H));
  const window = config.windowSize ?? null;
  if (
    window !== null &&
    // Both indices read: every() skips a hole, so [, 0] passed here and failed later as localWindowSize.
    (!Array.isArray(window) || window.length !== 2 || ![window[0], window[1]].every(Number.isSafeInteger))
  ) {
    throw new InvalidArgumentError(
      'windowSize',
      '[left, right] integers (negative = unbounded)',
      describeValue(window),
    );
  }
  const dropout = config.attentionDropout ?? 0;
  if (typeof dropout !== 'number' || !(dropout >= 0 && dropout < 1)) {
    throw new InvalidArgumentError('attentionDropout', 'a rate in [0, 1)', describeValue(dropout));
  }
  return { H, Hv, N, K, maskType, biasType, layout, transposed, scale, window, dropout };
}

/**
 * Per-batch valid lengths, TE's SequenceDescriptor for the padding mask types. A legacy mask in
 * TE's inverted convention (true = masked out) is accepted too and turned into our keep-mask.
 */
/** The factories' pass to SequenceDescriptor's constructor. */
const MADE_BY_FACTORY = Symbol('SequenceDescriptor factory');

export class SequenceDescriptor {
  /**
   * Made by the two factories only: TypeScript's `private` does not stop `new SequenceDescriptor(x)` from
   * JavaScript, which would keep whatever came, unchecked, for the module to read later.
   */
  private constructor(
    token: symbol,
    readonly querySeqLengths: Int32Array | null,
    readonly keyValueSeqLengths: Int32Array | null,
    readonly legacyMask: Tensor | null,
  ) {
    if (token !== MADE_BY_FACTORY) {
      throw new InvalidArgumentError(
        'SequenceDescriptor',
        'SequenceDescriptor.fromSeqLens(…) or SequenceDescriptor.fromLegacyMask(…)',
        'new SequenceDescriptor(…)',
      );
    }
  }

  /** Lengths per batch; keys default to the query lengths (self-attention), as TE's from_seqlens. */
  static fromSeqLens(
    querySeqLengths: ArrayLike<number>,
    keyValueSeqLengths?: ArrayLike<number>,
  ): SequenceDescriptor {
    const q = seqLengths('querySeqLengths', querySeqLengths);
    const kv = keyValueSeqLengths === undefined ? q : seqLengths('keyValueSeqLengths', keyValueSeqLengths);
    if (kv.length !== q.length) {
      throw new InvalidArgumentError(
        'keyValueSeqLengths',
        `${q.length} lengths (one per batch, as querySeqLengths)`,
        `${kv.length} lengths`,
      );
    }
    return new SequenceDescriptor(MADE_BY_FACTORY, q, kv, null);
  }

  /** TE's legacy mask: bool, broadcastable to (B,N,T,S), true where a pair is masked out. */
  static fromLegacyMask(mask: Tensor): SequenceDescriptor {
    // checkTensor first: `instanceof` on a revoked Proxy throws V8's TypeError.
    const checked = checkTensor('mask', mask);
    if (checked.dtype !== 'bool') {
      throw new InvalidArgumentError(
        'mask',
        'a bool Tensor (true = masked out, TE convention)',
        describeValue(checked),
      );
    }
    return new SequenceDescriptor(MADE_BY_FACTORY, null, null, checked);
  }
}

/**
 * Per-batch lengths as int32: an array or typed array of integers in [0, 2^31 − 1]. Whether each
 * fits its sequence (≤ T or S) is checked at the call, where T and S are known.
 */
function seqLengths(argument: string, value: unknown): Int32Array {
  refuseRevoked(argument, value, 'an array of non-negative integers (one per batch)');
  const isList = Array.isArray(value) || (ArrayBuffer.isView(value) && !(value instanceof DataView));
  if (!isList) {
    throw new InvalidArgumentError(
      argument,
      'an array of non-negative integers (one per batch)',
      describeValue(value),
    );
  }
  const list = snapshot(argument, value) as ArrayLike<unknown>; // read once: its length and each entry
  const lengths = new Int32Array(list.length);
  for (let b = 0; b < list.length; b++) {
    const v = list[b];
    if (typeof v !== 'number' || !Number.isInteger(v) || v < 0 || v > 2 ** 31 - 1) {
      throw new InvalidArgumentError(`${argument}[${b}]`, 'an integer in [0, 2^31 - 1]', describeValue(v));
    }
    lengths[b] = v;
  }
  return lengths;
}

/** A host copy moved to the GPU; the host copy freed at once (not left to the GC net). */
function onDevice(host: Tensor): Tensor {
  try {
    return host.to('cuda');
  } finally {
    host.dispose();
  }
}

/** Our keep-mask from TE's masked-out mask: the same shape and device with every value flipped. */
function invertMask(mask: Tensor): Tensor {
  const bits = mask.toHost().data as Uint8Array;
  const kept = new Uint8Array(bits.length);
  for (let i = 0; i < bits.length; i++) kept[i] = bits[i] ? 0 : 1;
  const result = Tensor.fromRaw(kept, mask.shape, 'bool');
  return mask.device === 'cuda' ? onDevice(result) : result;
}

/** Scales a pre-scale bias once, so that scale·(QKᵀ + bias) = scale·QKᵀ + (scale·bias). */
function scaleBias(bias: Tensor, scale: number): Tensor {
  const values = bias.toFloat64Array();
  for (let i = 0; i < values.length; i++) values[i] *= scale;
  const result = Tensor.fromArray(values, bias.shape, bias.dtype);
  return bias.device === 'cuda' ? onDevice(result) : result;
}

/** The mask, bias and window part of dotProductAttention's options for one call. */
export function attentionOptionsFor(
  config: ResolvedConfig,
  sequence: SequenceDescriptor | undefined,
  bias: Tensor | undefined,
): AttentionOptions {
  const options: AttentionOptions = { scale: config.scale };
  // Checked here, not by attention(): a pre-scale bias is read (scaleBias) before attention sees it.
  if (bias !== undefined && bias !== null) checkTensor('bias', bias);
  const padding = config.maskType.startsWith('padding');
  if (config.maskType.includes('causal')) {
    options.isCausal = true;
    options.causalAlignment = config.maskType.endsWith('bottom_right') ? 'bottom_right' : 'top_left';
  }
  if (padding) {
    if (!(sequence instanceof SequenceDescriptor)) {
      throw new InvalidArgumentError(
        'sequenceDescriptor',
        `a SequenceDescriptor (attnMaskType '${config.maskType}' pads by per-batch lengths)`,
        describeValue(sequence),
      );
    }
    if (sequence.legacyMask)
      options.mask = invertMask(checkTensor('sequenceDescriptor.mask', sequence.legacyMask));
    if (sequence.querySeqLengths) options.querySeqLengths = sequence.querySeqLengths;
    if (sequence.keyValueSeqLengths) options.keyValueSeqLengths = sequence.keyValueSeqLengths;
  } else if (sequence !== undefined && sequence !== null) {
    throw new InvalidArgumentError(
      'sequenceDescriptor',
      `none with attnMaskType '${config.maskType}' (use a padding mask type to apply it)`,
      'a SequenceDescriptor',
    );
  }
  const biasType = config.biasType ?? (bias ? 'post_scale_bias' : 'no_bias');
  if (biasType === 'no_bias' && bias) {
    throw new InvalidArgumentError(
      'bias',
      "none with attnBiasType 'no_bias'",
      `a tensor [${bias.shape.join(', ')}]`,
    );
  }
  if (biasType !== 'no_bias') {
    if (!bias) throw new InvalidArgumentError('bias', `a tensor (attnBiasType '${biasType}')`, 'none');
    options.bias = biasType === 'pre_scale_bias' ? scaleBias(bias, config.scale) : bias;
  }
  if (config.window) {
    const [left, right] = config.window.map((w) => (w < 0 ? Number.POSITIVE_INFINITY : w));
    if (left !== Number.POSITIVE_INFINITY || right !== Number.POSITIVE_INFINITY)
      options.localWindowSize = [left, right];
  }
  return options;
}
