/**
 * What the library reads from its caller it reads once, into copies it owns: options and lists behind
 * getters or Proxies, options inherited from Object.prototype, arrays mutated after the call, tensors over
 * memory that moves away, and a failed append that must leave the cache as it was.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { attention } from '../../../src/api/attention.js';
import { attentionVjp } from '../../../src/api/backward.js';
import { KVCache } from '../../../src/api/kv-cache.js';
import { describeValue, snapshot } from '../../../src/arguments.js';
import { InvalidArgumentError } from '../../../src/errors.js';
import { DotProductAttention } from '../../../src/te/module.js';
import { randomNormal, randomUniform } from '../../../src/tensor/random.js';
import { Tensor } from '../../../src/tensor/tensor.js';

const [B, T, S, N, H] = [1, 4, 6, 2, 8];
const q = randomNormal([B, T, N, H], { seed: 1, dtype: 'float64' });
const k = randomNormal([B, S, N, H], { seed: 2, dtype: 'float64' });
const v = randomNormal([B, S, N, H], { seed: 3, dtype: 'float64' });
const run = (options: object) =>
  attention(q, k, v, { implementation: 'reference', ...options }).output.toFloat64Array();

/** A list that answers `first` to its first read of each index and `later` after: a check-then-use race. */
function flipping<T>(first: T[], later: T[]): T[] {
  const reads = new Map<PropertyKey, number>();
  return new Proxy(first, {
    get(target, key, receiver) {
      const n = reads.get(key) ?? 0;
      reads.set(key, n + 1);
      if (typeof key === 'string' && /^\d+$/.test(key) && n > 0) return later[Number(key)];
      return Reflect.get(target, key, receiver);
    },
  });
}

describe('snapshot once', () => {
  it('reads each option and each list entry exactly once, own keys only, into frozen values', () => {
    let reads = 0;
    const given = {
      get scale() {
        reads++;
        return 0.5;
      },
      window: [1, 2],
    };
    const copy = snapshot('options', given) as { scale: number; window: number[] };
    assert.equal(reads, 1);
    assert.equal(copy.scale, 0.5);
    assert.equal(reads, 1, 'the copy is read, not the getter');
    assert.ok(Object.isFrozen(copy) && Object.isFrozen(copy.window));
    given.window[0] = 99;
    assert.equal(copy.window[0], 1);
    // Nothing inherited: the copy's prototype is an empty object without one of its own (a constructor's, so
    // that V8 keeps the copy's properties fast), not Object.prototype.
    const proto = Object.getPrototypeOf(copy);
    assert.equal(Reflect.ownKeys(proto).length, 0);
    assert.equal(Object.getPrototypeOf(proto), null);
    assert.equal((copy as unknown as Record<string, unknown>).toString, undefined);
    const polluted = Object.prototype as Record<string, unknown>;
    polluted.isCausal = true;
    try {
      assert.equal((snapshot('options', {}) as Record<string, unknown>).isCausal, undefined);
    } finally {
      delete polluted.isCausal;
    }
  });

  it('a window that checks as [1, 1] and then reads [NaN, NaN] runs as [1, 1]', () => {
    const expected = run({ localWindowSize: [1, 1] });
    const got = run({ localWindowSize: flipping([1, 1], [Number.NaN, Number.NaN]) });
    assert.deepEqual(got, expected);
    assert.ok(got.some((x) => x !== 0));
  });

  it('an option whose getter answers differently on a second read is read once', () => {
    // The bias was read twice (present? then checked): a getter answering a tensor, then nothing, failed.
    const bias = randomNormal([B, N, T, S], { seed: 9, dtype: 'float64' });
    let n = 0;
    const options = {
      implementation: 'reference' as const,
      get bias() {
        n++;
        return n === 1 ? bias : undefined;
      },
    };
    // Passed as it is (run() spreads its options, which reads the getter before attention does).
    assert.deepEqual(attention(q, k, v, options).output.toFloat64Array(), run({ bias }));
    assert.equal(n, 1);
  });

  it('options inherited from Object.prototype are not options', () => {
    const proto = Object.prototype as Record<string, unknown>;
    const plain = run({});
    proto.isCausal = true;
    try {
      assert.deepEqual(run({}), plain);
    } finally {
      delete proto.isCausal;
    }
  });

  it('attentionVjp keeps its own copy of the options for the later backward', () => {
    const window: number[] = [1, 1];
    const f = attentionVjp(q, k, v, { localWindowSize: window as [number, number] });
    window[0] = 0;
    window[1] = 0;
    const ones = Tensor.fromArray(new Float64Array(f.output.size).fill(1), f.output.shape, 'float64');
    const later = f.backward(ones).dQuery.toFloat64Array();
    const fresh = attentionVjp(q, k, v, { localWindowSize: [1, 1] })
      .backward(ones)
      .dQuery.toFloat64Array();
    assert.deepEqual(later, fresh);
  });

  it("the TE module keeps a copy of its windowSize, not the caller's array", () => {
    const windowSize: [number, number] = [1, 1];
    const te = { headDim: H, numAttentionHeads: N, attnMaskType: 'no_mask' as const };
    const module = new DotProductAttention({ ...te, windowSize });
    const before = module.forward(q.astype('float32'), k.astype('float32'), v.astype('float32'));
    windowSize[0] = -1;
    windowSize[1] = -1;
    const after = module.forward(q.astype('float32'), k.astype('float32'), v.astype('float32'));
    assert.deepEqual(after.toFloat64Array(), before.toFloat64Array());
  });

  it('KVCache.append ids that check as distinct and then read equal write one token per sequence', () => {
    const cache = new KVCache({ numBlocks: 8, blockSize: 2, numKvHeads: 2, headDim: 8, device: 'cpu' });
    const a = cache.addSequence();
    const b = cache.addSequence();
    const key = randomNormal([2, 1, 2, 8], { seed: 4, dtype: 'bfloat16' });
    cache.append(flipping([a, b], [a, a]), key, key);
    assert.equal(cache.sequenceLength(a), 1);
    assert.equal(cache.sequenceLength(b), 1);
    assert.equal(cache.freeBlocks, 6);
  });

  it('shapes are read once: a shape that changes after its check makes no tensor of another size', () => {
    const t = Tensor.zeros(flipping([2, 3], [200, 300]));
    assert.deepEqual(t.shape, [2, 3]);
    assert.equal(t.size, 6);
  });
});

describe('tensors over caller memory', () => {
  const made = () => {
    const data = new Float64Array(B * S * N * H).fill(0.25);
    return { data, tensor: Tensor.fromRaw(data, [B, S, N, H], 'float64') };
  };

  it('a transferred buffer is refused at every use, naming the tensor', () => {
    const { data, tensor } = made();
    structuredClone(data.buffer, { transfer: [data.buffer] });
    assert.equal(data.length, 0);
    const moved = (e: unknown) =>
      e instanceof InvalidArgumentError &&
      /detached or transferred/.test(e.message) &&
      /0 of 96/.test(e.message);
    assert.throws(
      () => attention(q, tensor, v),
      (e) => moved(e) && (e as InvalidArgumentError).argument === 'key',
    );
    assert.throws(() => tensor.get(0, 0, 0, 0), moved);
    assert.throws(() => tensor.toFloat64Array(), moved);
    assert.throws(() => tensor.data, moved);
  });

  it('a view of a resizable buffer is refused at construction: shrunk and regrown it would read as zeros', () => {
    // A resizable ArrayBuffer (ES2024; Node 20 has it, the compile target's lib does not declare it).
    const Resizable = ArrayBuffer as unknown as new (
      bytes: number,
      options: { maxByteLength: number },
    ) => ArrayBuffer & { resize(bytes: number): void };
    const buffer = new Resizable(B * S * N * H * 8, { maxByteLength: 4096 });
    for (const view of [new Float64Array(buffer), new Float64Array(buffer, 0, B * S * N * H)]) {
      assert.throws(
        () => Tensor.fromRaw(view, [B, S, N, H], 'float64'),
        (e) =>
          e instanceof InvalidArgumentError &&
          e.argument === 'data' &&
          /resizable ArrayBuffer/.test(e.message),
      );
    }
  });
});

describe('all or nothing', () => {
  it('append after the pool was disposed takes no block', () => {
    const cache = new KVCache({ numBlocks: 4, blockSize: 2, numKvHeads: 1, headDim: 8, device: 'cpu' });
    const id = cache.addSequence();
    cache.valuePool.dispose();
    const key = randomNormal([1, 3, 1, 8], { seed: 5, dtype: 'bfloat16' });
    assert.throws(() => cache.append([id], key, key), InvalidArgumentError);
    assert.equal(cache.freeBlocks, 4);
    assert.equal(cache.sequenceLength(id), 0);
  });
});

describe('messages', () => {
  it('a boxed number is said to be one', () => {
    assert.match(describeValue(new Number(0.5)), /Number object/);
    assert.throws(
      () => attention(q, k, v, { scale: new Number(0.5) as unknown as number }),
      (e) => e instanceof InvalidArgumentError && /new Number\(0\.5\)/.test(e.message),
    );
  });

  it('randomNormal and randomUniform blame their own options, never `values`', () => {
    for (const f of [
      () => randomNormal([4], { seed: 0, dtype: 'int32', mean: 1e12 }),
      () => randomUniform([4], { seed: 0, dtype: 'int32', low: 1e12, high: 2e12 }),
    ]) {
      assert.throws(f, (e) => e instanceof InvalidArgumentError && e.argument === 'options');
    }
  });
});
