/**
 * contextParallelAttention with modifiers written for global positions: every block of the ring reads
 * them at its rows' global b, q and kv, so the gathered output equals attention on the whole sequence
 * (within 1e-6: the ring merges partial results by their float32 log-sum-exp, as its own tests allow).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { attention } from '../../../src/api/attention.js';
import { createBlockMask } from '../../../src/api/block-mask.js';
import {
  contextParallelAttention,
  gatherSequence,
  shardSequence,
} from '../../../src/api/context-parallel.js';
import { RingGroup } from '../../../src/api/ring-group.js';
import { UnsupportedError } from '../../../src/errors.js';
import { randomNormal } from '../../../src/tensor/random.js';
import { Tensor } from '../../../src/tensor/tensor.js';
import { alibi, and, causal, documentMask, prefixLm, relativeBias } from '../../../src/variants/library.js';

const [B, T, N, K, H] = [2, 24, 4, 2, 8];
const q = randomNormal([B, T, N, H], { seed: 21, dtype: 'float64' });
const k = randomNormal([B, T, K, H], { seed: 22, dtype: 'float64' });
const v = randomNormal([B, T, K, H], { seed: 23, dtype: 'float64' });
const docIds = Tensor.fromArray(
  Array.from({ length: B * T }, (_, i) => Math.floor((i % T) / (i < T ? 5 : 9))),
  [B, T],
  'int32',
);
const table = Tensor.fromArray(
  Array.from({ length: N * 9 }, (_, i) => Math.cos(i)),
  [N, 9],
  'float32',
);

describe('contextParallelAttention with modifiers', () => {
  const cases: [string, object][] = [
    ['documents and causal', { maskMod: and(documentMask(docIds), causal()) }],
    ['alibi, causal', { scoreMod: alibi(N), isCausal: true }],
    [
      'relativeBias and prefixLm',
      { scoreMod: relativeBias(table), maskMod: prefixLm(Tensor.fromArray([4, 17], [B], 'int32')) },
    ],
    ['an expression string and a window', { maskMod: 'kv % 3 != 1', localWindowSize: [7, 2] }],
  ];
  for (const [name, options] of cases) {
    for (const P of [2, 3]) {
      it(`${name}, P=${P}`, () => {
        const want = attention(q, k, v, { ...options, implementation: 'reference' }).output.toFloat64Array();
        const { outputs } = contextParallelAttention(
          shardSequence(q, P),
          shardSequence(k, P),
          shardSequence(v, P),
          {
            ...options,
            group: RingGroup.loopback(P),
          },
        );
        const got = gatherSequence(outputs).toFloat64Array();
        for (let i = 0; i < want.length; i++)
          assert.ok(Math.abs(got[i] - want[i]) < 1e-6, `${i}: ${got[i]} vs ${want[i]}`);
      });
    }
  }
  it('refuses a block mask (it is made for one call, not per block)', () => {
    const m = and(documentMask(docIds), causal());
    assert.throws(
      () =>
        contextParallelAttention(shardSequence(q, 2), shardSequence(k, 2), shardSequence(v, 2), {
          maskMod: m,
          blockMask: createBlockMask(m, { B, N, T, S: T }),
          group: RingGroup.loopback(2),
        } as never),
      UnsupportedError,
    );
  });
});
