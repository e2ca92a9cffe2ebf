/**
 * createBlockMask on the CPU: every block's kind against brute force, the b/h broadcast, the checks
 * tying a block mask to its call, and CPU flash through a block mask against the reference without one.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { attention } from '../../../src/api/attention.js';
import { attentionVjp } from '../../../src/api/backward.js';
import { createBlockMask } from '../../../src/api/block-mask.js';
import { InvalidArgumentError } from '../../../src/errors.js';
import { Random, randomNormal } from '../../../src/tensor/random.js';
import { Tensor } from '../../../src/tensor/tensor.js';
import { compileModifiers } from '../../../src/variants/compile.js';
import {
  and,
  causal,
  documentMask,
  or,
  prefixLm,
  sinks,
  slidingWindow,
} from '../../../src/variants/library.js';
import { type MaskMod, maskMod } from '../../../src/variants/modifiers.js';

const refused = (run: () => unknown, argument: string, text?: RegExp) =>
  assert.throws(run, (e: unknown) => {
    assert.ok(e instanceof InvalidArgumentError, String(e));
    assert.equal(e.argument, argument);
    if (text) assert.match(e.message, text);
    return true;
  });

function bruteForce(
  m: MaskMod,
  B: number,
  N: number,
  T: number,
  S: number,
  bq: number,
  bkv: number,
): number[] {
  const keep = compileModifiers(undefined, m, { B, N, T, S }, 'cpu').maskMod;
  assert.ok(keep);
  const kinds: number[] = [];
  for (let b = 0; b < B; b++)
    for (let h = 0; h < N; h++)
      for (let qb = 0; qb * bq < T; qb++)
        for (let kb = 0; kb * bkv < S; kb++) {
          const seen: boolean[] = [];
          for (let q = qb * bq; q < Math.min(T, (qb + 1) * bq); q++)
            for (let kv = kb * bkv; kv < Math.min(S, (kb + 1) * bkv); kv++) seen.push(keep(b, h, q, kv));
          kinds.push(seen.every((x) => !x) ? 0 : seen.every((x) => x) ? 2 : 1);
        }
  return kinds;
}

describe('block classification', () => {
  const random = new Random(7);
  const [B, N, T, S] = [2, 3, 45, 37];
  const ids = Array.from({ length: B * 64 }, (_, i) => Math.floor((i % 64) / 9) + (random.nextUint32() % 2));
  const docIds = Tensor.fromArray(ids, [B, 64], 'int32');
  const lengths = Tensor.fromArray([5, 20], [B], 'int32');
  const cases: [string, MaskMod][] = [
    ['causal', causal()],
    ['slidingWindow', slidingWindow(6, 2)],
    ['documents and causal', and(documentMask(docIds), causal())],
    ['prefixLm', prefixLm(lengths)],
    ['window or sinks', or(slidingWindow(4, 0), sinks(3))],
    ['per head', maskMod('(kv + h) % 3 != 0 || q < 4')],
    ['nothing kept', maskMod('kv < 0')],
  ];
  for (const [name, m] of cases) {
    it(`${name}: empty/partial/full equal brute force, with b and h stored once when unread`, () => {
      for (const [bq, bkv] of [
        [16, 8],
        [7, 5],
        [64, 64],
      ]) {
        const bm = createBlockMask(m, { B, N, T, S, blockQ: bq, blockKV: bkv });
        const want = bruteForce(m, B, N, T, S, bq, bkv);
        const got = Array.from(bm.kinds.toHost().data as Uint8Array);
        // Expand the stored (Bm, Nm) to (B, N) to compare.
        const per = bm.qBlocks * bm.kvBlocks;
        const expanded: number[] = [];
        for (let b = 0; b < B; b++)
          for (let h = 0; h < N; h++) {
            const at = ((bm.Bm === 1 ? 0 : b) * bm.Nm + (bm.Nm === 1 ? 0 : h)) * per;
            expanded.push(...got.slice(at, at + per));
          }
        assert.deepEqual(expanded, want, `${bq}×${bkv}`);
        assert.deepEqual(bm.kinds.shape, [bm.Bm, bm.Nm, Math.ceil(T / bq), Math.ceil(S / bkv)]);
      }
    });
  }
  it('reads b and h only where the mask does', () => {
    const bm = (m: MaskMod) => createBlockMask(m, { B, N, T, S });
    assert.deepEqual([bm(causal()).Bm, bm(causal()).Nm], [1, 1]);
    assert.deepEqual([bm(prefixLm(lengths)).Bm, bm(prefixLm(lengths)).Nm], [B, 1]);
    assert.deepEqual([bm(maskMod('h > 0')).Bm, bm(maskMod('h > 0')).Nm], [1, N]);
  });
});

describe('a block mask belongs to its call', () => {
  const [B, T, N, K, H] = [2, 40, 2, 1, 8];
  const q = randomNormal([B, T, N, H], { seed: 1, dtype: 'float64' });
  const k = randomNormal([B, T, K, H], { seed: 2, dtype: 'float64' });
  const v = randomNormal([B, T, K, H], { seed: 3, dtype: 'float64' });
  const dOut = randomNormal([B, T, N, H], { seed: 4, dtype: 'float64' });
  const ids = Tensor.fromArray(
    Array.from({ length: B * T }, (_, i) => Math.floor((i % T) / (i < T ? 11 : 7))),
    [B, T],
    'int32',
  );
  const docs = and(documentMask(ids), causal());
  const blockMask = createBlockMask(docs, { B, N, T, S: T, blockQ: 8, blockKV: 16 });
  it('CPU flash through the block mask equals the reference without it, forward and backward', () => {
    const want = attentionVjp(q, k, v, { maskMod: docs, implementation: 'reference' });
    const got = attentionVjp(q, k, v, { maskMod: docs, blockMask, implementation: 'flash' });
    const close = (a: Tensor, b: Tensor) => {
      const [x, y] = [a.toFloat64Array(), b.toFloat64Array()];
      for (let i = 0; i < x.length; i++) assert.ok(x[i] === y[i] || Math.abs(x[i] - y[i]) < 1e-12, `${i}`);
    };
    close(got.output, want.output);
    const [g, w] = [got.backward(dOut), want.backward(dOut)];
    close(g.dQuery, w.dQuery);
    close(g.dKey, w.dKey);
    close(g.dValue, w.dValue);
  });
  it('refuses other sizes, another mask, no mask, a copy, and the wrong device', () => {
    refused(
      () => attention(q, k, v, { maskMod: docs, blockMask: createBlockMask(docs, { B, N: 4, T, S: T }) }),
      'blockMask',
      /N=2/,
    );
    refused(() => attention(q, k, v, { maskMod: causal(), blockMask }), 'blockMask', /another maskMod/);
    refused(() => attention(q, k, v, { blockMask }), 'blockMask', /no maskMod/);
    refused(() => attention(q, k, v, { maskMod: docs, blockMask: { ...blockMask } }), 'blockMask');
    refused(
      () => createBlockMask(docs, { B, N, T, S: T, device: 'cuda' }),
      "maskMod 'and(documentMask, causal)' captures.docIds.device",
    );
    refused(() => createBlockMask(docs, { B, N, T, S: T, blockQ: 0 }), 'blockQ');
    refused(() => createBlockMask(docs, { B, N, T, S: T, bq: 8 } as never), 'createBlockMask options');
  });
});

describe('a block mask is tied to the tensors its mask reads', () => {
  it('the same expression over another batch of docIds is another mask', () => {
    const [B, T, N, H] = [1, 16, 1, 4];
    const q = randomNormal([B, T, N, H], { seed: 9, dtype: 'float64' });
    const ids = (n: number) =>
      Tensor.fromArray(
        Array.from({ length: T }, (_, i) => Math.floor(i / n)),
        [B, T],
        'int32',
      );
    const first = and(documentMask(ids(4)), causal());
    const blockMask = createBlockMask(first, { B, N, T, S: T, blockQ: 4, blockKV: 4 });
    assert.doesNotThrow(() => attention(q, q, q, { maskMod: first, blockMask }));
    // Rebuilt from the same tensor: the same mask, accepted.
    assert.doesNotThrow(() =>
      attention(q, q, q, { maskMod: and(documentMask(first.captures[0].tensor), causal()), blockMask }),
    );
    refused(
      () => attention(q, q, q, { maskMod: and(documentMask(ids(4)), causal()), blockMask }),
      'blockMask',
      /another maskMod/,
    );
  });
});

describe('CPU flash skips the tiles a block mask leaves empty', () => {
  it('documents of 32 at T=160: tiles between documents skipped, results equal the reference', () => {
    const [B, T, N, H] = [1, 160, 2, 16];
    const q = randomNormal([B, T, N, H], { seed: 61, dtype: 'float64' });
    const k = randomNormal([B, T, N, H], { seed: 62, dtype: 'float64' });
    const v = randomNormal([B, T, N, H], { seed: 63, dtype: 'float64' });
    const dOut = randomNormal([B, T, N, H], { seed: 64, dtype: 'float64' });
    const docs = and(
      documentMask(
        Tensor.fromArray(
          Array.from({ length: T }, (_, i) => Math.floor(i / 32)),
          [B, T],
          'int32',
        ),
      ),
      causal(),
    );
    const blockMask = createBlockMask(docs, { B, N, T, S: T, blockQ: 16, blockKV: 16 });
    const kinds = Array.from(blockMask.kinds.toHost().data as Uint8Array);
    assert.ok(kinds.filter((x) => x === 0).length > kinds.length / 2, 'most blocks are empty');
    const want = attentionVjp(q, k, v, { maskMod: docs, implementation: 'reference' });
    const got = attentionVjp(q, k, v, { maskMod: docs, blockMask, implementation: 'flash' });
    const same = (a: Tensor, b: Tensor, what: string) => {
      const [x, y] = [a.toFloat64Array(), b.toFloat64Array()];
      for (let i = 0; i < x.length; i++) assert.ok(Math.abs(x[i] - y[i]) < 1e-12, `${what} ${i}`);
    };
    same(got.output, want.output, 'output');
    const [g, w] = [got.backward(dOut), want.backward(dOut)];
    same(g.dQuery, w.dQuery, 'dQuery');
    same(g.dKey, w.dKey, 'dKey');
    same(g.dValue, w.dValue, 'dValue');
  });
});
