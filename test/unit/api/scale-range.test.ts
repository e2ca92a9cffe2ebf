/**
 * `scale` past float32's range is refused: every backend but the float64 reference holds it as ±inf, and the
 * output is all NaN whatever the data (JAX and PyTorch give that NaN without a word). A finite scale inside the
 * range runs, on every entry that takes one.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  attention,
  attentionVjp,
  DotProductAttention,
  InvalidArgumentError,
  randomNormal,
} from '../../../src/index.js';

const q = randomNormal([1, 4, 2, 8], { seed: 1 });
const FLOAT32_MAX = 3.4028234663852886e38;

describe('scale is refused where every output would be NaN', () => {
  for (const scale of [1e308, -1e39, Number.MAX_VALUE]) {
    it(`attention, attentionVjp and the TE module refuse scale ${scale}`, () => {
      const named = (argument: string) => (e: unknown) =>
        e instanceof InvalidArgumentError && e.argument === argument && /3\.4028e38/.test(e.message);
      assert.throws(() => attention(q, q, q, { scale }), named('scale'));
      assert.throws(() => attentionVjp(q, q, q, { scale }), named('scale'));
      assert.throws(
        () => new DotProductAttention({ headDim: 8, numAttentionHeads: 2, scaleFactor: scale }),
        named('scaleFactor'),
      );
    });
  }
  it('float32 largest and tiny scales run to finite outputs', () => {
    for (const scale of [FLOAT32_MAX / 1e37, -0, 1e-300]) {
      const out = attention(q, q, q, { scale }).output.toFloat64Array();
      assert.ok(out.every(Number.isFinite), `scale ${scale}`);
    }
    // The edge itself is accepted: the refusal is for values float32 cannot hold.
    assert.doesNotThrow(() => attention(q, q, q, { scale: FLOAT32_MAX, implementation: 'reference' }));
  });
});
