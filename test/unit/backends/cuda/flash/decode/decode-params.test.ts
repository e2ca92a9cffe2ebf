/**
 * DecodeParams as decode.ts marshals it — bytes written once per call, copied as they are by both of a
 * call's launches — against the field-by-field 'struct' layout launchKernel applies (packStruct: the same
 * rules and writes). The C struct of decode_common.cuh as the compiler lays it out is checked in
 * test/kernels/decode-params-layout.test.ts (`npm run test:kernels`).
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  DECODE_PARAM_TYPES,
  DECODE_PARAMS_BYTES,
  marshalDecodeParams,
} from '../../../../../../src/backends/cuda/flash/decode/decode.js';
import { packStruct } from '../../../../../../src/backends/cuda/runtime/launch.js';
import { AttnlabError } from '../../../../../../src/errors.js';

// Distinct values in every field: a swapped or shifted field changes the bytes.
const values = {
  pointers: Array.from({ length: 12 }, (_, i) =>
    i === 5 ? 0n : 0x7f3a00000000n + BigInt(i) * 0x10000n + 16n,
  ),
  strides: [4096, 128, 1024, 128, 1024, 128, 4096, 128],
  ints: [64, 1, 16384, 32, 8, 128, 128, 4, 16, 1024, 2, 1 << 29, 7],
  scaleLog2: 0.12751743,
  flags: 5,
  rowsTotal: 2048,
};

describe('DecodeParams marshalling', () => {
  it('writes what the field-by-field struct layout of launchKernel writes', () => {
    const arg = marshalDecodeParams(values);
    assert.ok(arg.type === 'bytes');
    const all = [
      ...values.pointers,
      ...values.strides,
      ...values.ints,
      values.scaleLog2,
      values.flags,
      values.rowsTotal,
    ];
    const fields = DECODE_PARAM_TYPES.map((type, i) => ({ type, value: all[i] }));
    assert.equal(fields.length, all.length);
    assert.deepEqual(arg.bytes, packStruct(fields).bytes);
    assert.equal(arg.bytes.byteLength, DECODE_PARAMS_BYTES);
  });

  it('puts the fields where the kernel reads them: pointers, then strides, then the four-byte fields', () => {
    const arg = marshalDecodeParams(values);
    assert.ok(arg.type === 'bytes');
    const view = new DataView(arg.bytes.buffer, arg.bytes.byteOffset, arg.bytes.byteLength);
    assert.equal(view.getBigUint64(8 * 11, true), values.pointers[11]);
    assert.equal(view.getBigInt64(96, true), 4096n);
    assert.equal(view.getInt32(160, true), 64);
    assert.equal(view.getInt32(160 + 4 * 12, true), 7);
    assert.equal(view.getFloat32(212, true), Math.fround(values.scaleLog2));
    assert.equal(view.getInt32(216, true), 5);
    assert.equal(view.getInt32(220, true), 2048);
  });

  it('refuses a wrong field count with an AttnlabError naming what the kernel expects', () => {
    assert.throws(
      () => marshalDecodeParams({ ...values, ints: values.ints.slice(1) }),
      (error: unknown) => error instanceof AttnlabError && /12, 8, 13 \+ 3 in 224/.test(error.message),
    );
  });
});
