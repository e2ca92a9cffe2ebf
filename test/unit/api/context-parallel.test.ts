/**
 * contextParallelAttention on the CPU backends with the loopback group: the sharded result equals
 * one `attention` call on the gathered sequence (output and log-sum-exp), for P = 2 and 4, causal in
 * both alignments or not, MHA/GQA/MQA, padding, windows and T ≠ S; and its argument checks.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { attention } from '../../../src/api/attention.js';
import {
  contextParallelAttention,
  gatherSequence,
  shardSequence,
} from '../../../src/api/context-parallel.js';
import { RingGroup } from '../../../src/api/ring-group.js';
import { InvalidArgumentError, UnsupportedError } from '../../../src/errors.js';
import type { FloatDType } from '../../../src/tensor/dtype.js';
import { randomNormal } from '../../../src/tensor/random.js';
import { Tensor } from '../../../src/tensor/tensor.js';
import type { RingCase } from '../../support/ring-case.js';

const CASES: readonly RingCase[] = [
  { name: 'MHA', B: 2, T: 32, S: 32, N: 4, K: 4, options: {} },
  { name: 'causal', B: 2, T: 32, S: 32, N: 4, K: 4, options: { isCausal: true } },
  { name: 'causal GQA', B: 1, T: 48, S: 48, N: 4, K: 2, options: { isCausal: true } },
  { name: 'causal MQA', B: 1, T: 32, S: 32, N: 4, K: 1, options: { isCausal: true } },
  {
    name: 'T<S bottom_right',
    B: 2,
    T: 16,
    S: 48,
    N: 2,
    K: 1,
    options: { isCausal: true, causalAlignment: 'bottom_right' },
  },
  { name: 'T<S top_left', B: 1, T: 16, S: 32, N: 2, K: 2, options: { isCausal: true } },
  {
    name: 'padding',
    B: 3,
    T: 32,
    S: 32,
    N: 2,
    K: 2,
    options: { isCausal: true, querySeqLengths: [32, 20, 3], keyValueSeqLengths: [32, 27, 0] },
  },
  {
    name: 'padding bottom_right',
    B: 2,
    T: 32,
    S: 32,
    N: 4,
    K: 2,
    options: {
      isCausal: true,
      causalAlignment: 'bottom_right',
      querySeqLengths: [17, 32],
      keyValueSeqLengths: [30, 9],
    },
  },
  { name: 'window', B: 1, T: 32, S: 32, N: 2, K: 2, options: { localWindowSize: [5, 3] } },
  {
    name: 'causal window',
    B: 2,
    T: 32,
    S: 32,
    N: 2,
    K: 1,
    options: { isCausal: true, localWindowSize: [6, 0] },
  },
  { name: 'scale', B: 1, T: 16, S: 16, N: 2, K: 2, options: { scale: 0.3, localWindowSize: [Infinity, 2] } },
];

function maxDiff(a: Float64Array, b: Float64Array): number {
  let m = 0;
  for (let i = 0; i < a.length; i++) {
    if (a[i] === b[i]) continue; // equal infinities (the log-sum-exp of an empty row)
    m = Math.max(m, Math.abs(a[i] - b[i]));
  }
  return m;
}

function compare(
  c: RingCase,
  P: number,
  implementation: 'reference' | 'flash',
  dtype: FloatDType,
  tolerance: number,
) {
  const H = 8;
  const q = randomNormal([c.B, c.T, c.N, H], { seed: 1, dtype });
  const k = randomNormal([c.B, c.S, c.K, H], { seed: 2, dtype });
  const v = randomNormal([c.B, c.S, c.K, H], { seed: 3, dtype });
  const single = attention(q, k, v, { ...c.options, implementation: 'reference', returnLogSumExp: true });
  const group = RingGroup.loopback(P);
  const ring = contextParallelAttention(shardSequence(q, P), shardSequence(k, P), shardSequence(v, P), {
    ...(c.options as object),
    group,
    implementation,
    returnLogSumExp: true,
  });
  assert.deepEqual(ring.backends, [implementation]);
  assert.equal(ring.outputs.length, P);
  assert.deepEqual(ring.outputs[0].shape, [c.B, c.T / P, c.N, H]);
  assert.equal(ring.outputs[0].dtype, dtype);
  const out = gatherSequence(ring.outputs).toFloat64Array();
  const lse = gatherSequence(ring.logSumExps!.map((t) => t.reshape([c.B, c.T / P, c.N, 1]))).toFloat64Array();
  const dOut = maxDiff(out, single.output.toFloat64Array());
  const dLse = maxDiff(lse, single.logSumExp!.toFloat64Array());
  assert.ok(dOut <= tolerance, `${c.name} P=${P} ${implementation}: output differs by ${dOut}`);
  assert.ok(dLse <= 1e-5, `${c.name} P=${P} ${implementation}: log-sum-exp differs by ${dLse}`);
}

describe('contextParallelAttention (loopback, CPU)', () => {
  for (const P of [2, 4])
    for (const c of CASES) {
      if (c.T % (2 * P) !== 0 || c.S % (2 * P) !== 0) continue;
      it(`${c.name}, P=${P}: equals one call on the gathered sequence`, () => {
        compare(c, P, 'reference', 'float32', 1e-6);
        compare(c, P, 'flash', 'float32', 1e-6);
      });
    }

  it('bfloat16 at P=4: within one bf16 rounding of the single call', () => {
    // Both round a float64 result to bf16 once; merged partials may land on the other side of a tie.
    compare(CASES[2], 4, 'flash', 'bfloat16', 2 ** -7);
  });

  it('a masked NaN key stays out of the rows that do not see it (the NaN rule)', () => {
    const P = 2;
    const q = randomNormal([1, 16, 1, 4], { seed: 4 });
    const kBits = randomNormal([1, 16, 1, 4], { seed: 5 }).toFloat64Array();
    kBits.fill(Number.NaN, 12 * 4, 13 * 4); // key 12: seen only by queries 12…15 under causality
    const k = Tensor.fromArray(kBits, [1, 16, 1, 4]);
    const v = randomNormal([1, 16, 1, 4], { seed: 6 });
    const ring = contextParallelAttention(shardSequence(q, P), shardSequence(k, P), shardSequence(v, P), {
      group: RingGroup.loopback(P),
      isCausal: true,
    });
    const out = gatherSequence(ring.outputs).toFloat64Array();
    for (let t = 0; t < 16; t++) assert.equal(Number.isNaN(out[t * 4]), t >= 12, `row ${t}`);
  });

  it('P=1 is attention itself', () => {
    compare(CASES[1], 1, 'flash', 'float32', 1e-6);
  });
});

describe('contextParallelAttention arguments', () => {
  const P = 2;
  const q = randomNormal([1, 8, 2, 4], { seed: 1 });
  const shards = shardSequence(q, P);
  const group = RingGroup.loopback(P);
  const argument = (fn: () => unknown, name: string) =>
    assert.throws(fn, (e: unknown) => e instanceof InvalidArgumentError && e.argument === name);

  it('names the argument of a bad call', () => {
    argument(() => contextParallelAttention(shards, shards, shards, { group: {} as never }), 'options.group');
    argument(() => contextParallelAttention(shards, shards, shards, undefined as never), 'options.group');
    // The constructor is private to TypeScript only: a group made with `new` from JavaScript has no transport.
    const made = new (RingGroup as unknown as new (...a: unknown[]) => RingGroup)('loopback', 2, []);
    argument(() => contextParallelAttention(shards, shards, shards, { group: made }), 'options.group');
    argument(() => contextParallelAttention([shards[0]], shards, shards, { group }), 'query');
    argument(() => contextParallelAttention(shards, [shards[0], 'x'] as never, shards, { group }), 'key[1]');
    // A hole is named by its index (it was 'query' from inside attention; in gatherSequence a TypeError).
    const holed = Object.assign(new Array(P), { 1: shards[1] });
    argument(() => contextParallelAttention(holed, shards, shards, { group }), 'query[0]');
    argument(() => gatherSequence(Object.assign(new Array(P), { 0: shards[0] })), 'shards[1]');
    argument(
      () => contextParallelAttention(shards, shards, shards, { group, isCausal: 'yes' as never }),
      'isCausal',
    );
    argument(
      () => contextParallelAttention(shards, shards, shards, { group, querySeqLengths: [9] }),
      'querySeqLengths[0]',
    );
    const other = randomNormal([1, 6, 2, 4], { seed: 2 });
    argument(() => contextParallelAttention([shards[0], other], shards, shards, { group }), 'query[1]');
    argument(
      () => contextParallelAttention(shards, shards, shards, { group, is_causal: true } as never),
      'options',
    );
    // A misspelt group is an unknown option with a suggestion, not a missing group.
    assert.throws(
      () => contextParallelAttention(shards, shards, shards, { groups: group } as never),
      /^InvalidArgumentError: options: expected only group, .*, got unknown option 'groups' \(did you mean group\?\)$/,
    );
  });

  it('asks for T divisible by 2P, naming query or key', () => {
    const odd = [randomNormal([1, 3, 2, 4], { seed: 3 }), randomNormal([1, 3, 2, 4], { seed: 4 })];
    assert.throws(
      () => contextParallelAttention(odd, shards, shards, { group }),
      (e: unknown) =>
        e instanceof InvalidArgumentError && e.argument === 'query' && /divisible by 2P=4/.test(e.message),
    );
    assert.throws(
      () => contextParallelAttention(shards, odd, odd, { group }),
      (e: unknown) => e instanceof InvalidArgumentError && e.argument === 'key',
    );
    argument(() => shardSequence(randomNormal([1, 6, 2, 4], { seed: 5 }), 2), 'tensor');
    argument(() => shardSequence(q, 0), 'ranks');
    argument(() => gatherSequence([]), 'shards');
  });

  it('refuses bias and mask (not sharded) with UnsupportedError', () => {
    assert.throws(
      () =>
        contextParallelAttention(shards, shards, shards, {
          group,
          bias: Tensor.zeros([1, 1, 8, 8]),
        } as never),
      (e: unknown) => e instanceof UnsupportedError && /bias is not sharded/.test(e.message),
    );
  });

  it('shardSequence and gatherSequence are inverses, in the load-balanced layout', () => {
    const t = Tensor.fromArray(
      Array.from({ length: 16 }, (_, i) => i),
      [1, 16, 1, 1],
    );
    const s = shardSequence(t, 4);
    assert.deepEqual([...s[0].toFloat64Array()], [0, 1, 14, 15]); // chunks 0 and 7
    assert.deepEqual([...s[3].toFloat64Array()], [6, 7, 8, 9]); // chunks 3 and 4
    assert.deepEqual([...gatherSequence(s).toFloat64Array()], [...t.toFloat64Array()]);
  });

  it('RingGroup checks its size and devices', () => {
    argument(() => RingGroup.loopback(0), 'size');
    argument(() => RingGroup.nccl([0, 0]), 'devices');
    argument(() => RingGroup.nccl([]), 'devices');
    const g = RingGroup.loopback(2);
    g.destroy();
    argument(() => contextParallelAttention(shards, shards, shards, { group: g }), 'options.group');
  });
});
