/**
 * packFlashParams and packFlashBwdParams write the bytes launch.ts lays out for marshalFlashParams'
 * and marshalFlashBwdParams' structs (whose layouts test/kernels/kernel-params-layout.test.ts holds to
 * the compiler's): the backward launches the packed bytes, so every field must land where the struct has it.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { validateAttention } from '../../../../../src/api/validate.js';
import {
  buildFlashParams,
  FLASH_PARAMS_BYTES,
  marshalFlashParams,
  packFlashParams,
} from '../../../../../src/backends/cuda/flash/params.js';
import {
  FLASH_BWD_PARAMS_BYTES,
  marshalFlashBwdParams,
  packFlashBwdParams,
} from '../../../../../src/backends/cuda/flash/sm80/backward-params.js';
import { packStruct } from '../../../../../src/backends/cuda/runtime/launch.js';
import { Tensor } from '../../../../../src/tensor/tensor.js';

/** A distinct device-looking address per field, past 2^53 (no number could carry it exactly). */
const address = (i: number) => 0x7f00_0000_0000_0000n + BigInt(i) * 0x1_0000_0010n + 8n;

function packedAt(write: (view: DataView, at: number) => void, bytes: number, at: number): Uint8Array {
  const buffer = new Uint8Array(at + bytes + 8).fill(0xa5);
  write(new DataView(buffer.buffer), at);
  return buffer.subarray(at, at + bytes);
}

describe('packed flash launch parameters', () => {
  const q = Tensor.zeros([2, 8, 4, 64]);
  const k = Tensor.zeros([2, 9, 2, 64]);
  const v = Tensor.zeros([2, 9, 2, 32]);
  const problems = [
    validateAttention(q, k, k, { isCausal: true, localWindowSize: [5, 0] }),
    validateAttention(q, k, v, {
      isCausal: true,
      causalAlignment: 'bottom_right',
      scale: 0.3,
      bias: Tensor.zeros([1, 4, 8, 9]),
      mask: Tensor.zeros([2, 1, 1, 9], 'bool'),
      querySeqLengths: [8, 3],
      keyValueSeqLengths: [9, 2],
    }),
    validateAttention(q, k, k, { localWindowSize: [Number.POSITIVE_INFINITY, 2] }),
  ];

  it('packFlashParams: the bytes of marshalFlashParams, at any 8-byte offset', () => {
    for (const p of problems) {
      const pointers = {
        q: address(1),
        k: address(2),
        v: address(3),
        o: address(4),
        lse: address(5),
        bias: address(6),
        mask: 0n,
        qLens: address(8),
        kvLens: address(9),
      };
      const f = buildFlashParams(p, pointers);
      const arg = marshalFlashParams(f);
      assert.ok(arg.type === 'struct');
      const expected = packStruct(arg.fields).bytes;
      assert.equal(FLASH_PARAMS_BYTES, expected.byteLength);
      for (const at of [0, 16, 40])
        assert.deepEqual(
          packedAt((view, o) => packFlashParams(f, view, o), FLASH_PARAMS_BYTES, at),
          expected,
        );
    }
  });

  it('packFlashBwdParams: the bytes of marshalFlashBwdParams', () => {
    const pointers = {
      dOutput: address(1),
      lse2: address(2),
      dsum: address(3),
      dqAccum: 0n,
      dQuery: address(5),
      dKey: address(6),
      dValue: address(7),
      outputFloat32: address(8),
      dBias: 0n,
    };
    for (const [scale, tPad] of [
      [0.125, 128],
      [1 / Math.sqrt(96), 8320],
    ]) {
      const arg = marshalFlashBwdParams(pointers, scale, tPad);
      assert.ok(arg.type === 'struct');
      const expected = packStruct(arg.fields).bytes;
      assert.equal(FLASH_BWD_PARAMS_BYTES, expected.byteLength);
      for (const at of [0, 320])
        assert.deepEqual(
          packedAt(
            (view, o) => packFlashBwdParams(pointers, scale, tPad, view, o),
            FLASH_BWD_PARAMS_BYTES,
            at,
          ),
          expected,
        );
    }
  });
});
