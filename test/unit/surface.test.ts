/**
 * The public surface (src/index.ts) walked with bad input, one line per case: which export is
 * called, the error class expected, and the argument the error must name (for InvalidArgumentError,
 * exactly `error.argument`; for the other classes a pattern of the message). A last test checks that
 * every exported function and class has at least one line here, so a new export cannot skip it.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

// Read at the first CUDA use: `to('cuda')` must then say that the variable disabled CUDA.
process.env.ATTNLAB_DISABLE_CUDA = '1';

import * as attnlab from '../../src/index.js';
import {
  type AttnlabError,
  alibi,
  alibiSlopes,
  and,
  attention,
  attentionBackward,
  attentionBackwardFlops,
  attentionFlops,
  attentionVjp,
  autocast,
  causal,
  contextParallelAttention,
  createBlockMask,
  DelayedScaling,
  DotProductAttention,
  decodeValue,
  documentMask,
  dotProductAttention,
  encodeValue,
  Float8CurrentScaling,
  finiteMax,
  gatherSequence,
  InvalidArgumentError,
  KVCache,
  keep,
  maskMod,
  not,
  OutOfMemoryError,
  onDevice,
  or,
  prefixLm,
  Random,
  RingGroup,
  randomNormal,
  randomUniform,
  relativeBias,
  roundTo,
  SequenceDescriptor,
  scoreMod,
  shardSequence,
  sinks,
  slidingWindow,
  softcap,
  Tensor,
  tidy,
  UnsupportedError,
} from '../../src/index.js';

type ErrorClass = new (...args: never[]) => AttnlabError;
/** [export called, call, error class, argument name (InvalidArgumentError) or message pattern]. */
type Case = readonly [string, () => unknown, ErrorClass, string | RegExp];

const I = InvalidArgumentError;
const z = (shape: number[], dtype: attnlab.DType = 'float32') => Tensor.zeros(shape, dtype);
const q = z([2, 8, 4, 16]);
const kv = z([2, 10, 2, 16]);
const disposed = () => {
  const t = z([2, 8, 4, 16]);
  t.dispose();
  return t;
};
const viewOfDisposed = () => {
  const t = z([2, 3]);
  const view = t.reshape([3, 2]);
  t.dispose();
  return view;
};
const te = { headDim: 16, numAttentionHeads: 4, numGqaGroups: 2 };
const module = new DotProductAttention({ ...te, attnMaskType: 'no_mask' });
const padded = new DotProductAttention({ ...te, attnMaskType: 'padding' });
const biased = new DotProductAttention({ ...te, attnMaskType: 'no_mask', attnBiasType: 'pre_scale_bias' });
const bad = (o: object) => o as never;
const sbhd = new DotProductAttention({ ...te, attnMaskType: 'no_mask', qkvLayout: 'sbhd_sbhd_sbhd' });
const bs3hd = new DotProductAttention({
  headDim: 16,
  numAttentionHeads: 4,
  attnMaskType: 'no_mask',
  qkvLayout: 'bs3hd',
});
const ring2 = RingGroup.loopback(2);
const cache = { numBlocks: 4, blockSize: 4, numKvHeads: 2, headDim: 16, device: 'cpu' } as const;

const CASES: readonly Case[] = [
  // Tensor construction and dtypes
  ['Tensor.zeros', () => z([2], 'float128' as never), I, 'dtype'],
  ['Tensor.zeros', () => z([2, Number.NaN]), I, 'shape[1]'],
  ['Tensor.zeros', () => z([Number.POSITIVE_INFINITY]), I, 'shape[0]'],
  ['Tensor.zeros', () => z([-1]), I, 'shape[0]'],
  ['Tensor.zeros', () => z([2.5]), I, 'shape[0]'],
  ['Tensor.zeros', () => Tensor.zeros('2' as never), I, 'shape'],
  [
    'Tensor.zeros',
    () => z([2 ** 40, 2 ** 12]),
    OutOfMemoryError,
    /^host out of memory: asked for 16384\.00 TiB/,
  ],
  ['Tensor.fromArray', () => Tensor.fromArray(bad(['a', 'b']), [2]), I, 'values[0]'],
  ['Tensor.fromArray', () => Tensor.fromArray(5 as never, [1]), I, 'values'],
  ['Tensor.fromArray', () => Tensor.fromArray(bad([1, null]), [2]), I, 'values[1]'],
  ['Tensor.fromArray', () => Tensor.fromArray([1, 2], [3]), I, 'values'],
  ['Tensor.fromArray', () => Tensor.fromArray([2 ** 31], [1], 'int32'), I, 'values[0]'],
  ['Tensor.fromArray', () => Tensor.fromArray([0, -(2 ** 31) - 1], [2], 'int32'), I, 'values[1]'],
  ['Tensor.fromArray', () => Tensor.fromArray([Number.NaN], [1], 'int32'), I, 'values[0]'],
  ['Tensor.fromArray', () => Tensor.fromArray([Number.NEGATIVE_INFINITY], [1], 'int32'), I, 'values[0]'],
  [
    'Tensor.fromArray',
    () => Tensor.fromArray([1], [1], 'float32', bad({ saturate: 'yes' })),
    I,
    'options.saturate',
  ],
  ['Tensor.fromArray', () => Tensor.fromArray([1], [1], 'float32', bad({ clamp: true })), I, 'options'],
  ['Tensor.fromArray', () => Tensor.fromArray([1], [1], 'bf16' as never), I, 'dtype'],
  ['Tensor.fromRaw', () => Tensor.fromRaw(null as never, [2], 'float16'), I, 'data'],
  ['Tensor.fromRaw', () => Tensor.fromRaw(new Float32Array(2), [2], 'float16'), I, 'data'],
  ['Tensor.fromRaw', () => Tensor.fromRaw(new Uint16Array(3), [2], 'float16'), I, 'data'],
  ['Tensor.fromRaw', () => Tensor.fromRaw(new Uint16Array(2), [Number.NaN], 'float16'), I, 'shape[0]'],
  ['Tensor.astype', () => Tensor.fromArray([1, Number.NaN], [2]).astype('int32'), I, 'tensor[1]'],
  ['Tensor.astype', () => z([1]).astype('int64' as never), I, 'dtype'],
  ['Tensor.reshape', () => z([2, 3]).reshape([4]), I, 'shape'],
  ['Tensor.reshape', () => z([2, 3]).reshape([Number.NaN, 6]), I, 'shape[0]'],
  ['Tensor.to', () => z([1]).to('gpu' as never), I, 'device'],
  ['Tensor.to', () => z([1]).to('cuda'), UnsupportedError, /ATTNLAB_DISABLE_CUDA=1 disabled CUDA/],
  ['Tensor.get', () => z([2]).get(5), I, 'index[0]'],
  ['Tensor.get', () => z([2]).get('0' as never), I, 'index[0]'],
  ['Tensor.toFloat64Array', () => disposed().toFloat64Array(), I, 'tensor'],
  ['Tensor.toHost', () => viewOfDisposed().toHost(), I, 'tensor'],
  ['Tensor.fromDeviceBuffer', () => Tensor.fromDeviceBuffer(null as never, [1], 'float32'), I, 'buffer'],
  // Only ptr was checked: no release() failed at dispose() as a TypeError, and a NaN size passed
  [
    'Tensor.fromDeviceBuffer',
    () => Tensor.fromDeviceBuffer(bad({ ptr: 1n, bytes: 1 << 20 }), [1], 'float32'),
    I,
    'buffer',
  ],
  [
    'Tensor.fromDeviceBuffer',
    () =>
      Tensor.fromDeviceBuffer(
        bad({ ptr: 1n, bytes: Number.NaN, released: false, release() {} }),
        [4],
        'float32',
      ),
    I,
    'buffer',
  ],
  ['Tensor.astype', () => disposed().astype('float32'), I, 'tensor'],
  // Seeded random tensors: seeds are safe integers, each its own stream (none alias)
  ['randomNormal', () => randomNormal([2], undefined as never), I, 'options'],
  ['randomNormal', () => randomNormal([2], bad({})), I, 'seed'],
  ['randomNormal', () => randomNormal([2], { seed: 1.5 }), I, 'seed'],
  ['randomNormal', () => randomNormal([2], bad({ seed: '1' })), I, 'seed'],
  ['randomNormal', () => randomNormal([2], { seed: 2 ** 53 }), I, 'seed'],
  ['randomNormal', () => randomNormal([2], { seed: 1, mean: Number.NaN }), I, 'mean'],
  ['randomNormal', () => randomNormal([2], bad({ seed: 1, std: '1' })), I, 'std'],
  ['randomNormal', () => randomNormal([2], { seed: 1, std: -1 }), I, 'std'],
  ['randomNormal', () => randomNormal([2], bad({ seed: 1, dtype: 'fp32' })), I, 'dtype'],
  ['randomNormal', () => randomNormal([2], bad({ seed: 1, sd: 1 })), I, 'options'],
  ['randomNormal', () => randomNormal([-2], { seed: 1 }), I, 'shape[0]'],
  ['randomNormal', () => randomNormal([2 ** 45], { seed: 1 }), OutOfMemoryError, /asked for 256\.00 TiB/],
  ['randomUniform', () => randomUniform([2], { seed: 1, low: 1, high: 0 }), I, 'high'],
  ['randomUniform', () => randomUniform([2], bad({ seed: 1, low: 'a' })), I, 'low'],
  ['randomUniform', () => randomUniform([2], null as never), I, 'options'],
  ['Random', () => new Random(Number.NaN), I, 'seed'],
  // attention / dotProductAttention: every option, typed
  ['attention', () => attention(q, kv, kv, null as never), I, 'options'],
  ['attention', () => attention(q, kv, kv, [] as never), I, 'options'],
  ['attention', () => attention(q, kv, kv, 'causal' as never), I, 'options'],
  ['attention', () => attention(q, kv, kv, bad({ is_causal: true })), I, 'options'],
  ['attention', () => attention(q, kv, kv, bad({ isCasual: true })), I, 'options'],
  ['attention', () => attention(q, kv, kv, { maskMod: 'score > 0' }), I, "maskMod 'custom'"],
  ['attention', () => attention(q, kv, kv, { scoreMod: 3 as never }), I, 'scoreMod'],
  ['attention', () => attention(q, kv, kv, { blockMask: {} as never }), I, 'blockMask'],
  ['scoreMod', () => scoreMod('score +* 2'), I, "scoreMod 'custom'"],
  ['scoreMod', () => scoreMod('score', { t: z([2], 'float64') }), I, "scoreMod 'custom' captures.t.dtype"],
  ['maskMod', () => maskMod('kv <= q &&'), I, "maskMod 'custom'"],
  ['maskMod', () => maskMod('kv <= q', bad([])), I, "maskMod 'custom' captures"],
  ['createBlockMask', () => createBlockMask(maskMod('kv <= q'), bad({ B: 0, N: 1, T: 4, S: 4 })), I, 'B'],
  ['createBlockMask', () => createBlockMask(3 as never, { B: 1, N: 1, T: 4, S: 4 }), I, 'maskMod'],
  ['slidingWindow', () => slidingWindow(-1, 0), I, 'slidingWindow left'],
  ['slidingWindow', () => slidingWindow(1, Number.NaN), I, 'slidingWindow right'],
  ['documentMask', () => documentMask(z([4])), I, 'documentMask docIds.dtype'],
  ['prefixLm', () => prefixLm('3' as never), I, 'prefixLm lengths'],
  ['alibi', () => alibi(z([4], 'float64')), I, 'alibi slopes.dtype'],
  ['alibiSlopes', () => alibiSlopes(0), I, 'alibiSlopes N'],
  ['softcap', () => softcap(-1), I, 'softcap c'],
  ['relativeBias', () => relativeBias(z([4, 8])), I, 'relativeBias table'],
  ['sinks', () => sinks(-2), I, 'sinks n'],
  ['and', () => and(), I, 'and'],
  ['or', () => or(causal(), 'kv < q' as never), I, 'or argument 1'],
  ['not', () => not(undefined as never), I, 'not argument 0'],
  ['attention', () => attention(q, kv, kv, bad({ scale: '0.125' })), I, 'scale'],
  ['attention', () => attention(q, kv, kv, { scale: Number.POSITIVE_INFINITY }), I, 'scale'],
  ['attention', () => attention(q, kv, kv, bad({ isCausal: 'false' })), I, 'isCausal'],
  ['attention', () => attention(q, kv, kv, bad({ isCausal: 1 })), I, 'isCausal'],
  ['attention', () => attention(q, kv, kv, bad({ returnLogSumExp: 'yes' })), I, 'returnLogSumExp'],
  ['attention', () => attention(q, kv, kv, bad({ causalAlignment: 'bottom-right' })), I, 'causalAlignment'],
  ['attention', () => attention(q, kv, kv, bad({ implementation: 'cuDNN' })), I, 'implementation'],
  [
    'attention',
    () => attention(q, kv, kv, { implementation: 'cudnn' }),
    UnsupportedError,
    /^cudnn cannot run this case: cudnn runs on cuda, the inputs are on cpu/,
  ],
  [
    'attention',
    () => attention(q, kv, kv, { implementation: 'naive' }),
    UnsupportedError,
    /naive runs on cuda/,
  ],
  ['attention', () => attention(q, kv, kv, bad({ float32Precision: 'high' })), I, 'float32Precision'],
  ['attention', () => attention(q, kv, kv, { querySeqLengths: [8, 5.9] }), I, 'querySeqLengths[1]'],
  ['attention', () => attention(q, kv, kv, bad({ querySeqLengths: 'ab' })), I, 'querySeqLengths'],
  [
    'attention',
    () => attention(q, kv, kv, { keyValueSeqLengths: [2 ** 32 + 3, 1] }),
    I,
    'keyValueSeqLengths[0]',
  ],
  [
    'attention',
    () => attention(q, kv, kv, { keyValueSeqLengths: bad([undefined, 1]) }),
    I,
    'keyValueSeqLengths[0]',
  ],
  ['attention', () => attention(q, kv, kv, { localWindowSize: Number.NaN }), I, 'localWindowSize'],
  ['attention', () => attention(q, kv, kv, { localWindowSize: [1, -1] }), I, 'localWindowSize'],
  ['attention', () => attention(q, kv, kv, bad({ bias: [1, 2] })), I, 'bias'],
  ['attention', () => attention(q, kv, kv, { bias: z([1, 1, 8, 10], 'int32') }), I, 'bias.dtype'],
  ['attention', () => attention(q, kv, kv, { bias: z([1, 1, 8, 9]) }), I, 'bias'],
  ['attention', () => attention(q, kv, kv, { mask: z([1, 1, 8, 10]) }), I, 'mask.dtype'],
  ['attention', () => attention(q, kv, kv, { mask: disposed() }), I, 'mask'],
  ['attention', () => attention('q' as never, kv, kv), I, 'query'],
  ['attention', () => attention(disposed(), kv, kv), I, 'query'],
  ['attention', () => attention(q, viewOfDisposed(), kv), I, 'key'],
  ['attention', () => attention(q, z([2, 10, 2, 16], 'float16'), kv), I, 'key.dtype'],
  ['attention', () => attention(q, kv, z([2, 10, 2, 16], 'bfloat16')), I, 'value.dtype'],
  ['attention', () => attention(z([2, 8, 4, 16], 'int32'), kv, kv), I, 'query.dtype'],
  ['attention', () => attention(z([8, 16]), kv, kv), I, 'query'],
  ['attention', () => attention(z([1, 2, 8, 4, 16]), kv, kv), I, 'query'],
  ['attention', () => attention(q, z([10, 2, 16]), z([10, 2, 16])), I, 'key/value'],
  ['attention', () => attention(q, z([2, 10, 2, 32]), kv), I, 'key'],
  ['attention', () => attention(q, z([2, 10, 3, 16]), z([2, 10, 3, 16])), I, 'key'],
  ['attention', () => attention(q, kv, z([2, 9, 2, 16])), I, 'value'],
  ['attention', () => attention(z([2, 0, 4, 16]), kv, kv), I, 'T'],
  ['dotProductAttention', () => dotProductAttention(q, kv, kv, bad({ isCausal: 'true' })), I, 'isCausal'],
  ['dotProductAttention', () => dotProductAttention(q, kv, kv, bad({ dropout: 0.1 })), I, 'options'],
  ['attentionFlops', () => attentionFlops({ B: 1, T: Number.NaN, S: 1, N: 1, H: 1 }), I, 'T'],
  ['attentionFlops', () => attentionFlops(null as never), I, 'problem'],
  // A misspelt flag would count the causal work twice; a Map holds no keys of its own
  [
    'attentionFlops',
    () => attentionFlops(bad({ B: 1, T: 1, S: 1, N: 1, H: 1, is_causal: true })),
    I,
    'problem',
  ],
  ['attention', () => attention(q, kv, kv, bad(new Map([['isCausal', true]]))), I, 'options'],
  // An output too large for the host (2^38 float64s) is out of memory, not V8's RangeError
  [
    'attention',
    () =>
      attention(z([1, 65536, 64, 1]), z([1, 1, 1, 1]), z([1, 1, 1, 65536]), { implementation: 'reference' }),
    OutOfMemoryError,
    /asked for 2\.00 TiB/,
  ],
  [
    'attention',
    () => attention(z([1, 65536, 64, 1]), z([1, 1, 1, 1]), z([1, 1, 1, 65536]), { implementation: 'flash' }),
    OutOfMemoryError,
    /asked for 2\.00 TiB/,
  ],
  ['attentionFlops', () => attentionFlops(bad({ B: 1, T: 1, S: 1, N: 1, H: 1, causal: 'no' })), I, 'causal'],
  // The backward pass: the forward's checks plus its own tensors and flags
  ['attentionVjp', () => attentionVjp(q, kv, kv, bad({ deterministic: 'yes' })), I, 'deterministic'],
  ['attentionVjp', () => attentionVjp(q, kv, kv, bad({ is_causal: true })), I, 'options'],
  ['attentionVjp', () => attentionVjp(q, z([2, 10, 2, 8]), kv), I, 'key'],
  ['attentionBackward', () => attentionBackward(q, kv, kv, q, null as never, q), I, 'logSumExp'],
  [
    'attentionBackward',
    () => attentionBackward(q, kv, kv, q, z([2, 8, 4]), q, { implementation: 'cudnn' }),
    UnsupportedError,
    /^cudnn backward cannot run this case/,
  ],
  ['attentionBackwardFlops', () => attentionBackwardFlops({ B: 1, T: 1, S: -1, N: 1, H: 1 }), I, 'S'],
  // The paged KV cache
  ['KVCache', () => new KVCache(bad({ ...cache, num_blocks: 4 })), I, 'options'],
  ['KVCache', () => new KVCache(bad({ ...cache, numBlocks: '4' })), I, 'numBlocks'],
  ['KVCache', () => new KVCache(bad({ ...cache, dtype: 'float32' })), I, 'dtype'],
  ['KVCache', () => new KVCache(null as never), I, 'options'],
  [
    'KVCache.append',
    () => new KVCache(cache).append([7], z([1, 1, 2, 16], 'bfloat16'), z([1, 1, 2, 16], 'bfloat16')),
    I,
    'ids[0]',
  ],
  ['KVCache.freeSequence', () => new KVCache(cache).freeSequence(3), I, 'id'],
  // Context parallelism (ring attention over a RingGroup)
  [
    'contextParallelAttention',
    () => contextParallelAttention([q, q], [kv, kv], [kv, kv], bad({})),
    I,
    'options.group',
  ],
  ['contextParallelAttention', () => contextParallelAttention([q], [kv], [kv], { group: ring2 }), I, 'query'],
  [
    'contextParallelAttention',
    () =>
      contextParallelAttention([z([2, 3, 4, 16]), z([2, 3, 4, 16])], [kv, kv], [kv, kv], { group: ring2 }),
    I,
    'query',
  ],
  [
    'contextParallelAttention',
    () =>
      contextParallelAttention(
        [q, q],
        [kv, kv],
        [kv, kv],
        bad({ group: ring2, mask: z([1, 1, 8, 10], 'bool') }),
      ),
    UnsupportedError,
    /mask is not sharded/,
  ],
  ['shardSequence', () => shardSequence(z([2, 6, 4, 16]), 2), I, 'tensor'],
  ['shardSequence', () => shardSequence(q, 1.5), I, 'ranks'],
  ['gatherSequence', () => gatherSequence([q, z([2, 6, 4, 16])]), I, 'shards[1]'],
  ['RingGroup.loopback', () => RingGroup.loopback(0), I, 'size'],
  ['onDevice', () => onDevice(0, 'fn' as never), I, 'fn'],
  ['onDevice', () => onDevice(1, () => 0), UnsupportedError, /ATTNLAB_DISABLE_CUDA=1/],
  ['RingGroup.nccl', () => RingGroup.nccl([0, 0]), I, 'devices'],
  ['RingGroup.nccl', () => RingGroup.nccl(2), UnsupportedError, /ATTNLAB_DISABLE_CUDA=1/],
  // Element conversions
  ['encodeValue', () => encodeValue('1' as never, 'float16'), I, 'value'],
  ['encodeValue', () => encodeValue(1, 'f16' as never), I, 'dtype'],
  ['encodeValue', () => encodeValue(2 ** 31, 'int32'), I, 'value'],
  ['encodeValue', () => encodeValue(1, 'float8_e4m3fn', bad({ saturate: 1 })), I, 'options.saturate'],
  ['decodeValue', () => decodeValue(70000, 'float16'), I, 'raw'],
  ['decodeValue', () => decodeValue(1.5, 'bfloat16'), I, 'raw'],
  ['roundTo', () => roundTo(1, 'int32' as never), I, 'dtype'],
  ['finiteMax', () => finiteMax('bool' as never), I, 'dtype'],
  // The TE-style module: config keys, TE's snake_case names, every flag's type
  [
    'DotProductAttention',
    () => new DotProductAttention(bad({ ...te, attn_mask_type: 'no_mask' })),
    I,
    'config',
  ],
  ['DotProductAttention', () => new DotProductAttention(bad({ ...te, num_gqa_groups: 2 })), I, 'config'],
  [
    'DotProductAttention',
    () => new DotProductAttention(bad({ kv_channels: 16, numAttentionHeads: 4 })),
    I,
    'config',
  ],
  ['DotProductAttention', () => new DotProductAttention(undefined as never), I, 'config'],
  ['DotProductAttention', () => new DotProductAttention(null as never), I, 'config'],
  ['DotProductAttention', () => new DotProductAttention(bad({ ...te, headDim: '16' })), I, 'headDim'],
  ['DotProductAttention', () => new DotProductAttention(bad({ ...te, headDim: [16] })), I, 'headDim'],
  [
    'DotProductAttention',
    () => new DotProductAttention({ ...te, numAttentionHeads: 8.5 }),
    I,
    'numAttentionHeads',
  ],
  ['DotProductAttention', () => new DotProductAttention({ ...te, numGqaGroups: 3 }), I, 'numGqaGroups'],
  [
    'DotProductAttention',
    () => new DotProductAttention(bad({ ...te, attnMaskType: 'padding-causal' })),
    I,
    'attnMaskType',
  ],
  [
    'DotProductAttention',
    () => new DotProductAttention(bad({ ...te, attnBiasType: 'alibi' })),
    I,
    'attnBiasType',
  ],
  [
    'DotProductAttention',
    () => new DotProductAttention(bad({ ...te, transposeBatchSequence: 'true' })),
    I,
    'transposeBatchSequence',
  ],
  ['DotProductAttention', () => new DotProductAttention(bad({ ...te, qkvLayout: 'bshd' })), I, 'qkvLayout'],
  [
    'DotProductAttention',
    () => new DotProductAttention(bad({ ...te, scaleFactor: '0.1' })),
    I,
    'scaleFactor',
  ],
  ['DotProductAttention', () => new DotProductAttention({ ...te, windowSize: [1.5, 0] }), I, 'windowSize'],
  [
    'DotProductAttention',
    () => new DotProductAttention({ ...te, attentionDropout: 1 }),
    I,
    'attentionDropout',
  ],
  ['DotProductAttention.forward', () => biased.forward(q, kv, kv, bad({ bias: [[0]] })), I, 'bias'],
  ['DotProductAttention.forward', () => biased.forward(q, kv, kv, { bias: disposed() }), I, 'bias'],
  [
    'DotProductAttention.forward',
    () => module.forward(q, kv, kv, bad({ deterministic: 'false' })),
    I,
    'deterministic',
  ],
  [
    'DotProductAttention.forward',
    () => module.forward(q, kv, kv, bad({ keepFp8Output: 1 })),
    I,
    'keepFp8Output',
  ],
  [
    'DotProductAttention.forward',
    () => module.forward(q, kv, kv, bad({ attention_mask: null })),
    I,
    'options',
  ],
  [
    'DotProductAttention.forward',
    () => module.forward(q, kv, kv, bad({ attn_mask_type: 'causal' })),
    I,
    'options',
  ],
  ['DotProductAttention.forward', () => module.forward(q, kv, kv, null as never), I, 'options'],
  ['DotProductAttention.forward', () => module.forward('q' as never, kv, kv), I, 'query'],
  ['DotProductAttention.forward', () => module.forward(q, kv, kv, bad({ autocast: {} })), I, 'autocast'],
  ['DotProductAttention.forward', () => padded.forward(q, kv, kv), I, 'sequenceDescriptor'],
  [
    'DotProductAttention.apply',
    () => padded.apply(q, kv, kv, { sequenceDescriptor: SequenceDescriptor.fromSeqLens([9, 1]) }),
    I,
    'querySeqLengths[0]',
  ],
  [
    'DotProductAttention.apply',
    () => {
      const mask = z([2, 1, 8, 10], 'bool');
      const sequenceDescriptor = SequenceDescriptor.fromLegacyMask(mask);
      mask.dispose();
      return padded.apply(q, kv, kv, { sequenceDescriptor });
    },
    I,
    'sequenceDescriptor.mask',
  ],
  ['SequenceDescriptor.fromSeqLens', () => SequenceDescriptor.fromSeqLens([5.9]), I, 'querySeqLengths[0]'],
  [
    'SequenceDescriptor.fromSeqLens',
    () => SequenceDescriptor.fromSeqLens([2 ** 32 + 3]),
    I,
    'querySeqLengths[0]',
  ],
  [
    'SequenceDescriptor.fromSeqLens',
    () => SequenceDescriptor.fromSeqLens(bad(['abc'])),
    I,
    'querySeqLengths[0]',
  ],
  ['SequenceDescriptor.fromSeqLens', () => SequenceDescriptor.fromSeqLens([-1]), I, 'querySeqLengths[0]'],
  [
    'SequenceDescriptor.fromSeqLens',
    () => SequenceDescriptor.fromSeqLens(undefined as never),
    I,
    'querySeqLengths',
  ],
  [
    'SequenceDescriptor.fromSeqLens',
    () => SequenceDescriptor.fromSeqLens('abc' as never),
    I,
    'querySeqLengths',
  ],
  [
    'SequenceDescriptor.fromSeqLens',
    () => SequenceDescriptor.fromSeqLens([1, 2], [1]),
    I,
    'keyValueSeqLengths',
  ],
  [
    'SequenceDescriptor.fromSeqLens',
    () => SequenceDescriptor.fromSeqLens([1], [Number.NaN]),
    I,
    'keyValueSeqLengths[0]',
  ],
  ['SequenceDescriptor.fromLegacyMask', () => SequenceDescriptor.fromLegacyMask(z([1])), I, 'mask'],
  // Recipes and autocast
  ['DelayedScaling', () => new DelayedScaling(bad({ amax_history_len: 16 })), I, 'DelayedScaling options'],
  ['DelayedScaling', () => new DelayedScaling(bad({ interval: 1 })), I, 'DelayedScaling options'],
  ['DelayedScaling', () => new DelayedScaling(bad({ margin: '0' })), I, 'margin'],
  ['DelayedScaling', () => new DelayedScaling(bad({ amaxComputeAlgo: 'mean' })), I, 'amaxComputeAlgo'],
  ['DelayedScaling', () => new DelayedScaling(bad({ amaxHistoryLen: 0 })), I, 'amaxHistoryLen'],
  ['DelayedScaling', () => new DelayedScaling(null as never), I, 'options'],
  ['Float8CurrentScaling', () => new Float8CurrentScaling(bad({ fp8Format: 'E5M2' })), I, 'fp8Format'],
  [
    'Float8CurrentScaling',
    () => new Float8CurrentScaling(bad({ format: 'E4M3' })),
    I,
    'Float8CurrentScaling options',
  ],
  ['autocast', () => autocast(bad({ enabled: 'true' })), I, 'enabled'],
  ['autocast', () => autocast(bad({ fallback: 'no' })), I, 'fallback'],
  ['autocast', () => autocast(bad({ recipe: {} })), I, 'recipe'],
  ['autocast', () => autocast(bad({ fp8_recipe: new DelayedScaling() })), I, 'autocast options'],
  ['autocast', () => autocast(null as never), I, 'autocast options'],
  ['autocast', () => autocast({}, 5 as never), I, 'body'],
  // A Proxy of a Tensor (Vue's reactive, MobX) passes instanceof but holds no storage: V8's TypeError from a
  // private field before; a disposed or proxied tensor of a sequence-first or packed TE layout was named 'tensor'
  ['attention', () => attention(new Proxy(q, {}), kv, kv), I, 'query'],
  ['attention', () => attention(Object.create(Tensor.prototype), kv, kv), I, 'query'],
  ['attention', () => attention(q, kv, kv, { bias: new Proxy(z([1, 1, 8, 10]), {}) }), I, 'bias'],
  [
    'DotProductAttention.forward',
    () => {
      const key = z([10, 2, 2, 16]);
      key.dispose();
      return sbhd.forward(z([8, 2, 4, 16]), key, z([10, 2, 2, 16]));
    },
    I,
    'key',
  ],
  [
    'DotProductAttention.forward',
    () => bs3hd.forward(new Proxy(z([2, 8, 3, 4, 16]), {})),
    I,
    'query (packed QKV)',
  ],
  [
    'DotProductAttention.backward',
    () => {
      const h128 = new DotProductAttention({ headDim: 128, numAttentionHeads: 2, attnMaskType: 'no_mask' });
      const x = z([1, 4, 2, 128], 'bfloat16');
      return autocast({}, () => h128.backward(x, x, x, new Proxy(z([1, 4, 2, 128], 'bfloat16'), {})));
    },
    I,
    'dOutput',
  ],
  // every() skipped the hole, and the call failed later naming localWindowSize
  [
    'DotProductAttention',
    () => new DotProductAttention(bad({ ...te, windowSize: Object.assign(new Array(2), { 1: 0 }) })),
    I,
    'windowSize',
  ],
  // A packed layout whose sizes it cannot hold: made, then every call refused naming key or value
  ['DotProductAttention', () => new DotProductAttention({ ...te, qkvLayout: 'bs3hd' }), I, 'numGqaGroups'],
  [
    'DotProductAttention',
    () => new DotProductAttention({ ...te, headDim: [16, 8], qkvLayout: 'sbhd_sb2hd' }),
    I,
    'headDim',
  ],
  // A hand-made scope's 'no' was truthy: the FP8 path ran
  [
    'DotProductAttention.forward',
    () =>
      module.forward(
        q,
        kv,
        kv,
        bad({ autocast: { enabled: 'no', recipe: new DelayedScaling(), fallback: false } }),
      ),
    I,
    'autocast.enabled',
  ],
  // The memory scope
  ['tidy', () => tidy(5 as never), I, 'fn'],
  ['tidy', () => tidy(async () => z([1])), I, 'fn'],
  ['keep', () => keep('t' as never), I, 'tensor'],
];

/**
 * Exports that take no arguments (nothing to validate) or are not functions one calls with input;
 * initWebgpu rejects its bad options asynchronously (test/unit/backends/webgpu/device.test.ts walks them).
 */
const NO_INPUT = new Set([
  'cudaAvailable',
  'deviceCount',
  'memoryStats',
  'emptyCache',
  'resetPeakMemory',
  'initWebgpu',
  'disposeWebgpu',
  'causal',
]);

describe('every public function rejects bad input with a typed error naming the argument', () => {
  for (const [api, call, type, argument] of CASES) {
    const label = `${api}: ${String(call)
      .replace(/^\(\) => /, '')
      .slice(0, 90)}`;
    it(label, () => {
      assert.throws(call, (e: unknown) => {
        assert.ok(
          e instanceof type,
          `expected ${type.name}, got ${e instanceof Error ? `${e.name}: ${e.message}` : String(e)}`,
        );
        if (typeof argument === 'string') {
          const error = e as InvalidArgumentError;
          assert.equal(error.argument, argument, error.message);
          assert.match(error.message, /^.+: expected .+, got .+$/s);
        } else {
          assert.match((e as Error).message, argument);
        }
        return true;
      });
    });
  }
});

describe('error messages say what came, with its type where the type is the problem', () => {
  const message = (fn: () => unknown) => {
    try {
      fn();
    } catch (error) {
      return (error as Error).message;
    }
    assert.fail('no error');
  };
  it('a string where a number belongs', () => {
    assert.equal(
      message(() => attention(q, kv, kv, bad({ scale: '0.125' }))),
      "scale: expected a finite number, got the string '0.125'",
    );
  });
  it("TE's snake_case names point at ours, with the list of valid keys", () => {
    const text = message(() => new DotProductAttention(bad({ ...te, attn_mask_type: 'no_mask' })));
    assert.match(
      text,
      /^config: expected only headDim, numAttentionHeads, .*attentionDropout, got unknown option 'attn_mask_type' \(did you mean attnMaskType\?\)$/,
    );
    assert.match(
      message(() => new DotProductAttention(bad({ ...te, num_gqa_groups: 2 }))),
      /did you mean numGqaGroups\?/,
    );
    assert.match(
      message(() => attention(q, kv, kv, bad({ isCasual: true }))),
      /did you mean isCausal\?/,
    );
    assert.match(
      message(() => new DelayedScaling(bad({ amax_history_len: 16 }))),
      /did you mean amaxHistoryLen\?/,
    );
    assert.match(
      message(() => attention(q, kv, kv, bad({ implementation: 'cuDNN' }))),
      /did you mean 'cudnn'\?/,
    );
  });
  it('a huge host tensor says how much was asked, for which shape', () => {
    assert.match(
      message(() => z([2 ** 40, 2 ** 12])),
      /asked for 16384\.00 TiB \(shape \[1099511627776, 4096\] float32\)/,
    );
  });
});

describe('coverage of the surface', () => {
  it('every exported function and class has a line in the table (or takes no input)', () => {
    const covered = new Set(CASES.map(([api]) => api.split('.')[0]));
    const missing = Object.entries(attnlab)
      .filter(
        ([name, value]) =>
          typeof value === 'function' && !(value.prototype instanceof Error) && name !== 'AttnlabError',
      )
      .map(([name]) => name)
      .filter((name) => !covered.has(name) && !NO_INPUT.has(name));
    assert.deepEqual(missing, []);
    for (const name of NO_INPUT)
      assert.equal((attnlab as unknown as Record<string, () => unknown>)[name].length, 0, name);
  });
});

describe('seeds', () => {
  it('seeds that aliased under >>> 0 now give different streams; seeds below 2^32 keep theirs', () => {
    const first = (seed: number) => new Random(seed).nextUint32();
    assert.notEqual(first(0), first(2 ** 32));
    assert.notEqual(first(-1), first(2 ** 32 - 1));
    assert.notEqual(first(1), first(1 - 2 ** 32));
    assert.notEqual(first(2 ** 40), first(2 ** 41));
    const stream = (seed: number) =>
      Array.from(randomNormal([4], { seed, dtype: 'float64' }).toFloat64Array());
    assert.notDeepEqual(stream(5), stream(5 + 2 ** 32));
  });
  it('int32 truncates toward zero, as a C, NumPy or PyTorch cast does', () => {
    assert.deepEqual(Array.from(Tensor.fromArray([2.7, -2.7, 2 ** 31 - 1], [3], 'int32').data), [
      2,
      -2,
      2 ** 31 - 1,
    ]);
  });
});
