/**
 * A revoked Proxy, or a getter or Proxy trap that throws, handed to any public entry point is an
 * InvalidArgumentError naming the argument: never V8's raw TypeError ("Cannot perform 'get' on a proxy that
 * has been revoked") from deep inside.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  attention,
  attentionBackward,
  attentionVjp,
  contextParallelAttention,
  DotProductAttention,
  encodeValue,
  gatherSequence,
  InvalidArgumentError,
  KVCache,
  keep,
  RingGroup,
  randomNormal,
  SequenceDescriptor,
  shardSequence,
  Tensor,
  tidy,
} from '../../../src/index.js';

const revoked = <T extends object>(target: T): T => {
  const { proxy, revoke } = Proxy.revocable(target, {});
  revoke();
  return proxy;
};
const q = () => randomNormal([1, 4, 2, 8], { seed: 1 });
const cpuCache = () => new KVCache({ numBlocks: 4, blockSize: 4, numKvHeads: 2, headDim: 8, device: 'cpu' });
const token = () => randomNormal([1, 1, 2, 8], { seed: 2, dtype: 'bfloat16' });

/** Asserts `fn` throws InvalidArgumentError naming `argument` (an exact name or a pattern). */
function refuses(fn: () => unknown, argument: string | RegExp, received = /revoked Proxy/): void {
  assert.throws(fn, (e) => {
    assert.ok(e instanceof InvalidArgumentError, `${(e as Error)?.name}: ${(e as Error)?.message}`);
    if (typeof argument === 'string') assert.equal(e.argument, argument);
    else assert.match(e.argument, argument);
    assert.match(e.received, received);
    return true;
  });
}

describe('a revoked Proxy at every public entry point', () => {
  const cases: [string, () => unknown, string][] = [
    ['attention options', () => attention(q(), q(), q(), revoked({})), 'options'],
    ['attention query', () => attention(revoked(q()), q(), q()), 'query'],
    ['attention value', () => attention(q(), q(), revoked(q())), 'value'],
    ['attention bias option', () => attention(q(), q(), q(), { bias: revoked(q()) }), 'options.bias'],
    ['attentionVjp options', () => attentionVjp(q(), q(), q(), revoked({})), 'options'],
    ['the pullback', () => attentionVjp(q(), q(), q()).backward(revoked(q())), 'dOutput'],
    [
      'attentionBackward options',
      () => {
        const f = attention(q(), q(), q(), { returnLogSumExp: true });
        return attentionBackward(q(), q(), q(), f.output, f.logSumExp!, f.output, revoked({}));
      },
      'options',
    ],
    ['KVCache options', () => new KVCache(revoked({}) as never), 'options'],
    ['KVCache.append ids', () => cpuCache().append(revoked([0]), token(), token()), 'ids'],
    ['KVCache.attention options', () => cpuCache().attention(q(), [0], revoked({})), 'options'],
    [
      'TE module config',
      () => new DotProductAttention(revoked({ headDim: 8, numAttentionHeads: 2 })),
      'config',
    ],
    [
      'TE forward options',
      () => new DotProductAttention({ headDim: 8, numAttentionHeads: 2 }).forward(q(), q(), q(), revoked({})),
      'options',
    ],
    [
      'contextParallelAttention shards',
      () => contextParallelAttention(revoked([q()]), [q()], [q()], { group: RingGroup.loopback(1) }),
      'query',
    ],
    [
      'contextParallelAttention options',
      () => contextParallelAttention([q()], [q()], [q()], revoked({}) as never),
      'options',
    ],
    ['shardSequence', () => shardSequence(revoked(q()), 2), 'tensor'],
    ['gatherSequence', () => gatherSequence(revoked([q()])), 'shards'],
    ['Tensor.fromArray values', () => Tensor.fromArray(revoked([1]), [1]), 'values'],
    ['Tensor.fromArray shape', () => Tensor.fromArray([1], revoked([1])), 'shape'],
    ['Tensor.fromArray options', () => Tensor.fromArray([1], [1], 'float32', revoked({})), 'options'],
    ['Tensor.fromRaw data', () => Tensor.fromRaw(revoked(new Float32Array(1)), [1], 'float32'), 'data'],
    ['Tensor.zeros shape', () => Tensor.zeros(revoked([1])), 'shape'],
    ['tensor.reshape', () => q().reshape(revoked([8, 8])), 'shape'],
    ['tensor.astype options', () => q().astype('bfloat16', revoked({})), 'options'],
    ['randomNormal options', () => randomNormal([2], revoked({ seed: 1 })), 'options'],
    ['randomNormal shape', () => randomNormal(revoked([2]), { seed: 1 }), 'shape'],
    ['encodeValue', () => encodeValue(revoked({}) as never, 'float32'), 'value'],
    ['tidy', () => tidy(revoked(() => 1)), 'fn'],
    ['a result of tidy', () => tidy(() => revoked({})), 'fn'],
    ['keep', () => keep(revoked(q())), 'tensor'],
    ['SequenceDescriptor.fromSeqLens', () => SequenceDescriptor.fromSeqLens(revoked([1])), 'querySeqLengths'],
    ['SequenceDescriptor.fromLegacyMask', () => SequenceDescriptor.fromLegacyMask(revoked(q())), 'mask'],
  ];
  for (const [what, fn, argument] of cases) it(what, () => refuses(fn, argument));
});

describe('a value that throws when read', () => {
  const boom = () => {
    throw new Error('boom');
  };
  it('a throwing getter on an option is named with its key', () => {
    const options = Object.defineProperty({}, 'isCausal', { get: boom, enumerable: true });
    refuses(() => attention(q(), q(), q(), options), 'options.isCausal', /threw Error: boom/);
  });
  it('a Proxy trap that throws (get, ownKeys, getPrototypeOf)', () => {
    const traps: ProxyHandler<object>[] = [{ get: boom }, { ownKeys: boom }, { getPrototypeOf: boom }];
    for (const handler of traps) {
      refuses(
        () => attention(q(), q(), q(), new Proxy({ isCausal: true }, handler)),
        /^options/,
        /threw Error: boom/,
      );
    }
  });
  it('a shape whose length or entry throws', () => {
    const entry = Object.defineProperty([1], 0, { get: boom });
    refuses(() => Tensor.zeros(entry), 'shape[0]', /threw Error: boom/);
    const length = new Proxy([1], { get: (t, k) => (k === 'length' ? boom() : Reflect.get(t, k)) });
    refuses(() => Tensor.zeros(length), 'shape', /threw Error: boom/);
  });
  it('a tensor argument whose prototype lookup throws is described, not thrown through', () => {
    const odd = new Proxy({}, { getPrototypeOf: boom });
    refuses(() => attention(odd as Tensor, q(), q()), 'query', /threw Error: boom/);
  });
});

describe('what came, said', () => {
  it('an object whose only keys are symbols names them (Symbol.toPrimitive is not a number)', () => {
    const value = { [Symbol.toPrimitive]: () => 0.5 };
    for (const call of [
      () => encodeValue(value as never, 'float32'),
      () => RingGroup.loopback(value as never),
    ]) {
      assert.throws(
        call,
        (e) =>
          e instanceof InvalidArgumentError && /an object \{\} \(with Symbol\.toPrimitive\)/.test(e.message),
      );
    }
  });
});

describe('SequenceDescriptor is made by its factories only', () => {
  it('new SequenceDescriptor(…) from JavaScript is refused, naming the factories', () => {
    const Ctor = SequenceDescriptor as unknown as new (...args: unknown[]) => unknown;
    assert.throws(
      () => new Ctor(revoked({})),
      (e) => e instanceof InvalidArgumentError && /fromSeqLens/.test(e.message),
    );
    assert.deepEqual([...SequenceDescriptor.fromSeqLens([3, 4]).querySeqLengths!], [3, 4]);
  });
});
