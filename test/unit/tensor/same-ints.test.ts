/**
 * The content compare that int32-cache.ts uses to find a kept device copy of a block table, lengths
 * or offsets: a byte compare of the two arrays' own bytes, views into larger buffers included.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { sameInts } from '../../../src/tensor/same-ints.js';

describe('int32 cache content compare', () => {
  it('is true only for the same ints in the same order', () => {
    const a = Int32Array.from({ length: 1025 }, (_, i) => (i * 7919) % 4096);
    assert.equal(sameInts(a, a.slice()), true);
    const changed = a.slice();
    changed[1024] = -1;
    assert.equal(sameInts(a, changed), false, 'the last entry differs');
    changed[1024] = a[1024];
    changed[0] ^= 1 << 24;
    assert.equal(sameInts(a, changed), false, 'a high byte of the first entry differs');
    assert.equal(sameInts(a, a.subarray(0, 1024)), false, 'a shorter array');
    assert.equal(sameInts(new Int32Array(0), new Int32Array(0)), true);
  });

  it("compares short lists (a decode step's lengths) element by element, to the same answers", () => {
    const a = Int32Array.of(4097, 3, -1);
    assert.equal(sameInts(a, Int32Array.of(4097, 3, -1)), true);
    assert.equal(sameInts(a, Int32Array.of(4097, 3, -2)), false);
    assert.equal(sameInts(a, Int32Array.of(4098, 3, -1)), false);
    assert.equal(sameInts(a, a.subarray(0, 2)), false);
  });

  it('compares the viewed ints, not the whole buffer, for views at an offset', () => {
    const buffer = Int32Array.from({ length: 64 }, (_, i) => i);
    const view = buffer.subarray(16, 32);
    assert.equal(
      sameInts(
        view,
        Int32Array.from({ length: 16 }, (_, i) => 16 + i),
      ),
      true,
    );
    assert.equal(sameInts(view, buffer.subarray(17, 33)), false);
  });
});
