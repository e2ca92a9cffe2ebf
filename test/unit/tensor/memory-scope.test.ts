/**
 * tidy(fn) and keep(t) on host tensors, and memoryStats()'s host counters: what is freed when, views
 * sharing storage, nested scopes, errors and promises, the TE module (bf16 and emulated FP8), and a
 * 100,000-call loop whose host memory stays exactly flat without a single dispose().
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  attention,
  autocast,
  DelayedScaling,
  DotProductAttention,
  InvalidArgumentError,
  KVCache,
  keep,
  memoryStats,
  randomNormal,
  SequenceDescriptor,
  Tensor,
  tidy,
} from '../../../src/index.js';
import { scopeDepth } from '../../../src/tensor/lifetime.js';

const host = () => {
  const { hostBytes, hostBlocks } = memoryStats();
  return { hostBytes, hostBlocks };
};

describe('tidy and keep', () => {
  it('frees what fn created and did not return; the returned tensor lives', () => {
    const before = host();
    let inner!: Tensor;
    const out = tidy(() => {
      inner = Tensor.zeros([10]);
      return Tensor.zeros([3], 'float64');
    });
    assert.equal(inner.disposed, true);
    assert.equal(out.disposed, false);
    assert.deepEqual(host(), { hostBytes: before.hostBytes + 24, hostBlocks: before.hostBlocks + 1 });
    out.dispose();
    assert.deepEqual(host(), before);
  });

  it('never frees tensors made outside it, even through a view made inside', () => {
    const outer = Tensor.fromArray([1, 2, 3, 4], [2, 2]);
    tidy(() => {
      outer.reshape([4]);
      outer.astype('float64');
    });
    assert.equal(outer.disposed, false);
    assert.deepEqual(Array.from(outer.toFloat64Array()), [1, 2, 3, 4]);
  });

  it('closes its scope when reading the result throws, and refuses a Proxy of a Tensor in it', () => {
    const { proxy, revoke } = Proxy.revocable({}, {});
    revoke();
    let made!: Tensor;
    assert.throws(() =>
      tidy(() => {
        made = Tensor.zeros([2]);
        return proxy;
      }),
    );
    assert.equal(made.disposed, true);
    const walked = new Proxy(
      {},
      {
        ownKeys() {
          throw new Error('trap');
        },
      },
    );
    assert.throws(() => tidy(() => walked), /trap/);
    assert.throws(
      () => tidy(() => ({ out: new Proxy(Tensor.zeros([2]), {}) })),
      (e: unknown) => e instanceof InvalidArgumentError && e.argument === 'fn',
    );
    assert.throws(() => keep(new Proxy(Tensor.zeros([1]), {})), InvalidArgumentError);
    // No scope was left open: one would hold every tensor made later outside any tidy for good.
    assert.equal(scopeDepth(), 0);
  });

  it('keeps the storage of a returned view (a rank-3 attention output is a reshape)', () => {
    const q = randomNormal([4, 2, 8], { seed: 1 });
    const r = tidy(() => attention(q, q, q, { returnLogSumExp: true }));
    assert.equal(r.output.disposed, false);
    assert.equal(r.logSumExp?.disposed, false);
    assert.deepEqual(r.output.shape, [4, 2, 8]);
    assert.ok(r.output.toFloat64Array().every(Number.isFinite));
  });

  it('finds tensors in arrays, Maps, Sets and nested objects, without calling getters', () => {
    let reads = 0;
    const made: Tensor[] = [];
    const make = () => {
      const t = Tensor.zeros([1]);
      made.push(t);
      return t;
    };
    const result = tidy(() => {
      const lazy = make();
      const dropped = make();
      void dropped;
      return {
        list: [make(), [make()]],
        map: new Map([['k', make()]]),
        set: new Set([make()]),
        nested: { deeper: { t: make() } },
        get lazy() {
          reads++;
          return lazy;
        },
      };
    });
    assert.equal(reads, 0);
    assert.deepEqual(
      made.map((t) => t.disposed),
      [true, true, false, false, false, false, false],
    );
    void result;
  });

  it('nests: an inner result belongs to the outer scope, freed there unless returned again', () => {
    let fromInner!: Tensor;
    const kept = tidy(() => {
      fromInner = tidy(() => Tensor.zeros([2]));
      assert.equal(fromInner.disposed, false);
      return tidy(() => Tensor.zeros([5]));
    });
    assert.equal(fromInner.disposed, true);
    assert.equal(kept.disposed, false);
  });

  it('keep(t) survives every enclosing scope; dispose() still frees it', () => {
    let held!: Tensor;
    tidy(() => {
      tidy(() => {
        held = keep(Tensor.zeros([4]));
      });
    });
    assert.equal(held.disposed, false);
    held.dispose();
    assert.equal(held.disposed, true);
  });

  it('frees everything when fn throws, and rethrows', () => {
    const before = host();
    let made!: Tensor;
    assert.throws(
      () =>
        tidy(() => {
          made = Tensor.zeros([8]);
          throw new Error('boom');
        }),
      /boom/,
    );
    assert.equal(made.disposed, true);
    assert.deepEqual(host(), before);
  });

  it('refuses a function that returns a Promise, after freeing what it made', () => {
    let made!: Tensor;
    assert.throws(
      () =>
        tidy(async () => {
          made = Tensor.zeros([8]);
          return made;
        }),
      (e: unknown) => e instanceof InvalidArgumentError && e.argument === 'fn',
    );
    assert.equal(made.disposed, true);
  });

  it("long-lived state made inside a scope (a KVCache and its pools) is not the scope's to free", () => {
    const cache = tidy(
      () => new KVCache({ numBlocks: 2, blockSize: 4, numKvHeads: 1, headDim: 8, device: 'cpu' }),
    );
    assert.equal(cache.keyPool.disposed, false);
    assert.equal(cache.valuePool.disposed, false);
    cache.dispose();
    assert.equal(cache.keyPool.disposed, true);
  });

  it('dispose() of any view frees the storage of every view of it', () => {
    const t = Tensor.zeros([2, 3]);
    const view = t.reshape([6]);
    view.dispose();
    assert.equal(t.disposed, true);
    assert.throws(() => t.toFloat64Array(), /tensor: expected a live tensor, got a disposed tensor \[2, 3\]/);
  });
});

describe('memoryStats on the host', () => {
  it('counts bytes and blocks of live tensors; reshapes share one block', () => {
    const before = host();
    const t = Tensor.zeros([5], 'float64');
    t.reshape([1, 5]);
    assert.deepEqual(host(), { hostBytes: before.hostBytes + 40, hostBlocks: before.hostBlocks + 1 });
    t.dispose();
    t.dispose();
    assert.deepEqual(host(), before);
  });

  it('stays exactly flat over 100,000 attention calls inside tidy, with no dispose()', () => {
    const q = randomNormal([1, 2, 1, 4], { seed: 1 });
    const k = randomNormal([1, 2, 1, 4], { seed: 2 });
    const before = host();
    for (let i = 0; i < 100_000; i++) {
      tidy(() => {
        const r = attention(q, k, k, { returnLogSumExp: true, isCausal: i % 2 === 0 });
        r.output.astype('bfloat16');
      });
      if (i % 10_000 === 0) assert.deepEqual(host(), before, `after ${i + 1} calls`);
    }
    assert.deepEqual(host(), before);
  });

  it('stays flat without tidy when the caller disposes what it got: paged, packed and KVCache calls', () => {
    // The CPU backends' gathered and spread copies, and the block table KVCache.attention makes, are the call's
    // own: they were left to the GC net, which a synchronous loop never lets run.
    const cache = new KVCache({ numBlocks: 8, blockSize: 2, numKvHeads: 1, headDim: 8, device: 'cpu' });
    const ids = [cache.addSequence(), cache.addSequence()];
    const rows = randomNormal([2, 3, 1, 8], { seed: 1, dtype: 'bfloat16' });
    cache.append(ids, rows, rows);
    const q = randomNormal([2, 1, 2, 8], { seed: 2, dtype: 'bfloat16' });
    const packed = randomNormal([5, 2, 8], { seed: 3, dtype: 'bfloat16' });
    // The cache keeps the block table of its last attention call (one, freed with the cache): its first
    // call makes it.
    cache.attention(q, ids).output.dispose();
    const before = host();
    for (let i = 0; i < 10; i++) {
      for (const implementation of ['flash', 'reference'] as const) {
        const calls = [
          cache.attention(q, ids, { implementation, returnLogSumExp: true }),
          attention(packed, packed, packed, {
            implementation,
            querySeqOffsets: [0, 2, 5],
            keyValueSeqOffsets: [0, 2, 5],
            returnLogSumExp: true,
          }),
        ];
        for (const r of calls) {
          r.output.dispose();
          r.logSumExp?.dispose();
        }
      }
    }
    assert.deepEqual(host(), before);
  });

  it("stays flat without tidy over the TE module's bf16 calls whose outputs are disposed", () => {
    // Its own copies (sequence-first and packed layouts, a pre-scaled bias, an inverted legacy mask, the
    // backward's residuals on the CPU) were left to the GC net.
    const te = { headDim: 8, numAttentionHeads: 2, attnMaskType: 'no_mask' } as const;
    const sbhd = new DotProductAttention({ ...te, qkvLayout: 'sbhd_sbhd_sbhd' });
    const bs3hd = new DotProductAttention({ ...te, qkvLayout: 'bs3hd' });
    const preScale = new DotProductAttention({ ...te, attnBiasType: 'pre_scale_bias' });
    const padding = new DotProductAttention({ ...te, attnMaskType: 'padding' });
    const x = randomNormal([1, 4, 2, 8], { seed: 1 });
    const packed = randomNormal([1, 4, 3, 2, 8], { seed: 2 });
    const bias = randomNormal([1, 2, 4, 4], { seed: 3 });
    const sequenceDescriptor = SequenceDescriptor.fromLegacyMask(Tensor.zeros([1, 1, 4, 4], 'bool'));
    const before = host();
    for (let i = 0; i < 5; i++) {
      sbhd.forward(x, x, x).dispose();
      bs3hd.forward(packed).dispose();
      preScale.forward(x, x, x, { bias }).dispose();
      padding.forward(x, x, x, { sequenceDescriptor }).dispose();
      const g = preScale.backward(x, x, x, x, { bias });
      for (const t of [g.dQuery, g.dKey, g.dValue, g.dBias]) t?.dispose();
    }
    assert.deepEqual(host(), before);
  });

  it('stays flat with the TE module, bf16 and the emulated FP8 path', () => {
    const attn = new DotProductAttention({ headDim: 16, numAttentionHeads: 2, attnMaskType: 'causal' });
    const x = randomNormal([1, 4, 2, 16], { seed: 3, dtype: 'bfloat16' });
    const recipe = new DelayedScaling({ amaxHistoryLen: 4 });
    const before = host();
    for (let i = 0; i < 500; i++) {
      // What tidy returns survives it, so these return nothing.
      tidy(() => {
        attn.forward(x, x, x);
      });
      tidy(() => {
        autocast({ recipe }, () => attn.apply(x, x, x, { keepFp8Output: true }));
      });
    }
    assert.deepEqual(host(), before);
    const kept = tidy(() => autocast({ recipe }, () => attn.apply(x, x, x, { keepFp8Output: true })));
    assert.equal(kept.output.disposed, false);
    assert.equal(kept.output8?.tensor.disposed, false);
    assert.equal(kept.precision, 'fp8');
  });
});
