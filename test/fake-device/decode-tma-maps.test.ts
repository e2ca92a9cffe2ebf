/**
 * decode-tma.ts's kept tensor maps (tmaMapBytes) against the stand-in driver (test/fake-device/cudnn-fake.c,
 * whose cuTensorMapEncodeTiled writes the address and rank into the map): a decode loop's repeated call
 * gets the same two maps without encoding again, and any change the maps depend on gets new ones.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { validateAttention } from '../../src/api/validate.js';
import { tmaMapBytes, tmaVariant } from '../../src/backends/cuda/flash/decode/decode-tma.js';
import { allocDevice } from '../../src/backends/cuda/runtime/memory.js';
import type { AttentionProblem } from '../../src/backends/problem.js';
import { Tensor } from '../../src/tensor/tensor.js';
import { useFakeCudaStack } from './fake-cuda.js';

const { skip } = useFakeCudaStack('attnlab-fake-tma-maps-');
const device = (shape: number[]) =>
  Tensor.fromDeviceBuffer(allocDevice(shape.reduce((a, d) => a * d, 2)), shape, 'bfloat16');
const address = (bytes: Uint8Array) => new BigUint64Array(bytes.buffer, bytes.byteOffset, 2)[0];

describe('TMA decode maps, kept per key buffer', { skip }, () => {
  it('are the same bytes for a repeated call, new ones for another layout, variant or buffer', () => {
    const q = device([2, 1, 32, 128]);
    const k = device([2, 4096, 1, 128]);
    const v = device([2, 4096, 1, 128]);
    const problem = (key: Tensor, value: Tensor) => validateAttention(q, key, value, {}) as AttentionProblem;
    const p = problem(k, v);
    const one = tmaVariant(p, 'sm_90a', 1);
    const first = tmaMapBytes(p, one);
    assert.equal(address(first[0]), k.buffer.ptr);
    assert.equal(address(first[1]), v.buffer.ptr);
    assert.equal(tmaMapBytes(problem(k, v), tmaVariant(p, 'sm_90a', 1)), first, 'the same call again');
    assert.equal(
      tmaMapBytes(p, tmaVariant(p, 'sm_90a', 2)),
      first,
      'row groups: the same 128-key tiles and boxes',
    );
    const grouped = tmaMapBytes(p, { ...one, boxGroup: 8 });
    assert.notEqual(grouped, first, 'grouped boxes: a 5-D map');
    assert.equal(new BigUint64Array(grouped[0].buffer, grouped[0].byteOffset, 2)[1], 5n);
    const otherValue = device([2, 4096, 1, 128]);
    const swapped = tmaMapBytes(problem(k, otherValue), one);
    assert.equal(address(swapped[1]), otherValue.buffer.ptr, 'another value buffer');
    assert.notEqual(tmaMapBytes({ ...p, S: 2048 }, one), first, 'another length');
    assert.equal(tmaMapBytes(p, one), tmaMapBytes(p, one), 'kept again after the changes');
  });
});
