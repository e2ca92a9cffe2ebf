/** cuLaunchKernelEx's config for a programmatic dependent launch (src/backends/cuda/runtime/launch-dependent.ts), byte by byte. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  LAUNCH_ATTRIBUTE_BYTES,
  LAUNCH_CONFIG_BYTES,
  PROGRAMMATIC_STREAM_SERIALIZATION,
  writeDependentLaunch,
} from '../../../../../src/backends/cuda/runtime/launch-dependent.js';

describe('programmatic dependent launch config', () => {
  it("lays out CUlaunchConfig and its one attribute as cuda.h's offsets say", () => {
    const at = 64;
    const view = new DataView(new ArrayBuffer(at + LAUNCH_CONFIG_BYTES + LAUNCH_ATTRIBUTE_BYTES + 8));
    new Uint8Array(view.buffer).fill(0xaa); // stale bytes: every byte of both structs is written
    const base = 0x7f00_0000_1000n;
    const config = writeDependentLaunch(view, at, base, {
      grid: [2, 1, 64],
      block: [288, 1, 1],
      sharedBytes: 197_760,
      stream: 0xdead_beefn,
    });
    assert.equal(config, base + 64n);
    const u32 = (o: number) => view.getUint32(at + o, true);
    assert.deepEqual([0, 4, 8, 12, 16, 20, 24].map(u32), [2, 1, 64, 288, 1, 1, 197_760]);
    assert.equal(u32(28), 0, 'padding before the stream');
    assert.equal(view.getBigUint64(at + 32, true), 0xdead_beefn, 'hStream at 32');
    const attribute = base + BigInt(at + LAUNCH_CONFIG_BYTES);
    assert.equal(view.getBigUint64(at + 40, true), attribute, 'attrs at 40: the attribute right after');
    assert.deepEqual([u32(48), u32(52)], [1, 0], 'numAttrs at 48, then padding to 56');
    const a = at + LAUNCH_CONFIG_BYTES;
    assert.equal(view.getUint32(a, true), PROGRAMMATIC_STREAM_SERIALIZATION);
    assert.equal(view.getInt32(a + 8, true), 1, 'value.programmaticStreamSerializationAllowed');
    const rest = new Uint8Array(view.buffer, a + 12, LAUNCH_ATTRIBUTE_BYTES - 12);
    assert.ok(
      rest.every((b) => b === 0),
      'the rest of the value union is zero',
    );
    assert.equal(
      view.getUint8(at + LAUNCH_CONFIG_BYTES + LAUNCH_ATTRIBUTE_BYTES),
      0xaa,
      'nothing written past',
    );
    assert.equal(view.getUint8(at - 1), 0xaa, 'nothing written before');
  });
});
