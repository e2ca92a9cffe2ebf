/**
 * One test per class of bad input: each names the argument, what was expected and what came, and is a
 * typed error.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { dotProductAttention } from '../../../src/api/attention.js';
import { InvalidArgumentError, UnsupportedError } from '../../../src/errors.js';
import { Tensor } from '../../../src/tensor/tensor.js';

const z = (shape: number[], dtype: 'float32' | 'float16' | 'bool' | 'int32' = 'float32') =>
  Tensor.zeros(shape, dtype);
const q = z([2, 8, 4, 16]);
const kv = z([2, 10, 2, 16]);

function rejects(
  fn: () => unknown,
  pattern: RegExp,
  type: new (...a: never[]) => Error = InvalidArgumentError,
) {
  assert.throws(fn, (e: unknown) => {
    assert.ok(e instanceof type, `expected ${type.name}, got ${String(e)}`);
    assert.match((e as Error).message, pattern);
    return true;
  });
}

describe('dotProductAttention rejects bad input with a named, typed error', () => {
  it('wrong rank', () => {
    rejects(
      () => dotProductAttention(z([8, 4]), kv, kv),
      /^query: expected rank 4 \(B,T,N,H\) or rank 3 \(T,N,H\), got rank 2 \[8, 4\]/,
    );
    rejects(() => dotProductAttention(q, z([10, 2, 16]), kv), /key\/value: expected the same rank as query/);
  });
  it('not a tensor', () => {
    rejects(() => dotProductAttention([1, 2] as never, kv, kv), /query: expected a Tensor, got an array/);
  });
  it('mismatched head dim and batch', () => {
    rejects(
      () => dotProductAttention(q, z([2, 10, 2, 32]), kv),
      /key: expected head dim H=16 as in query, got 32/,
    );
    rejects(
      () => dotProductAttention(q, z([3, 10, 2, 16]), kv),
      /key: expected batch B=2 as in query, got 3/,
    );
    rejects(
      () => dotProductAttention(q, kv, z([2, 9, 2, 16])),
      /value: expected \(B,S,K,Hv\) with B=2, S=10, K=2/,
    );
  });
  it('N % K != 0', () => {
    rejects(
      () => dotProductAttention(q, z([2, 10, 3, 16]), z([2, 10, 3, 16])),
      /key: expected K dividing N \(query heads N=4\), got K=3 \(N % K = 1\)/,
    );
  });
  it('mask or bias not broadcastable', () => {
    rejects(
      () => dotProductAttention(q, kv, kv, { mask: z([2, 4, 8, 9], 'bool') }),
      /mask: expected rank 4, broadcastable to \(B,N,T,S\) = \[2, 4, 8, 10\], got \[2, 4, 8, 9\]/,
    );
    rejects(() => dotProductAttention(q, kv, kv, { bias: z([8, 10]) }), /bias: expected rank 4.*got rank 2/);
  });
  it('bad dtypes', () => {
    rejects(
      () => dotProductAttention(q, kv, kv, { mask: z([1, 1, 8, 10]) }),
      /mask.dtype: expected bool \(true keeps\), got float32/,
    );
    rejects(
      () => dotProductAttention(q, z([2, 10, 2, 16], 'float16'), kv),
      /key.dtype: expected float32 \(the query's dtype\), got float16/,
    );
    rejects(
      () => dotProductAttention(z([2, 8, 4, 16], 'int32'), kv, kv),
      /query.dtype: expected a floating-point dtype, got int32/,
    );
  });
  it('bad sequence lengths', () => {
    rejects(
      () => dotProductAttention(q, kv, kv, { querySeqLengths: [8, -1] }),
      /querySeqLengths\[1\]: expected an integer in \[0, T=8\], got -1/,
    );
    rejects(
      () => dotProductAttention(q, kv, kv, { keyValueSeqLengths: [11, 2] }),
      /keyValueSeqLengths\[0\]: expected an integer in \[0, S=10\], got 11/,
    );
    rejects(
      () => dotProductAttention(q, kv, kv, { querySeqLengths: [1] }),
      /querySeqLengths: expected 2 values \(B=2\), got 1 values/,
    );
  });
  it('bad scalars and options', () => {
    rejects(() => dotProductAttention(q, kv, kv, { scale: Number.NaN }), /scale: expected a finite number/);
    rejects(
      () => dotProductAttention(q, kv, kv, { localWindowSize: -3 }),
      /localWindowSize: expected a non-negative integer, got -3/,
    );
    rejects(
      () => dotProductAttention(q, kv, kv, { localWindowSize: [1] as never }),
      /localWindowSize: expected a non-negative integer or \[left, right\]/,
    );
    rejects(
      () => dotProductAttention(q, kv, kv, { causalAlignment: 'center' as never }),
      /causalAlignment: expected one of 'top_left', 'bottom_right', got the string 'center'/,
    );
    rejects(
      () => dotProductAttention(q, kv, kv, { is_causal: true } as never),
      /options: expected only .*, got unknown option 'is_causal'/,
    );
    rejects(
      () => dotProductAttention(q, kv, kv, { implementation: 'xla' as never }),
      /implementation: expected one of 'reference', 'naive', 'flash', 'cudnn', 'webgpu', got the string 'xla'/,
    );
  });
  it('a backend forced on a device where it does not run is unsupported, not invalid', () => {
    rejects(
      () => dotProductAttention(q, kv, kv, { implementation: 'cudnn' }),
      /^cudnn cannot run this case: cudnn runs on cuda, the inputs are on cpu/,
      UnsupportedError,
    );
  });
  it('an empty dimension', () => {
    rejects(() => dotProductAttention(z([2, 0, 4, 16]), kv, kv), /T: expected a size of at least 1, got 0/);
  });
  it('UnsupportedError is a distinct class', () => {
    assert.ok(!(new UnsupportedError('x', 'y') instanceof InvalidArgumentError));
  });
});
