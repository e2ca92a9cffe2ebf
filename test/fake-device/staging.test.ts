/**
 * Page-locked staging of small uploads (src/backends/cuda/runtime/staging.ts) on the stand-in driver:
 * uploads up to STAGED_MAX_BYTES are copied from the page-locked ring, larger ones from the caller's
 * memory; every upload arrives intact however many laps the ring makes; leaving a segment records an
 * event, and entering a segment a lap later waits on the event recorded when it was left.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import koffi from 'koffi';
import { copyInt32ToDevice, copyToDevice, copyToHost } from '../../src/backends/cuda/runtime/memory.js';
import { STAGED_MAX_BYTES, stagingStats } from '../../src/backends/cuda/runtime/staging.js';
import { libraryCallsDuring, useFakeCudaStack } from './fake-cuda.js';

const { dir, skip } = useFakeCudaStack('attnlab-staging-');

function lastUploadPinned(): boolean {
  return koffi.load(join(dir, 'libcuda.so.1')).func('int fake_last_upload_pinned()')() === 1;
}

function readInts(buffer: { bytes: number } & Parameters<typeof copyToHost>[0], n: number): Int32Array {
  const out = new Int32Array(n);
  copyToHost(buffer, new Uint8Array(out.buffer));
  return out;
}

describe('page-locked staging of small uploads', { skip }, () => {
  it('stages up to STAGED_MAX_BYTES, copies larger uploads from the caller', () => {
    for (const bytes of [4, 256, STAGED_MAX_BYTES]) {
      const values = Int32Array.from({ length: bytes / 4 }, (_, i) => i * 7 - 3);
      const buffer = copyInt32ToDevice(values);
      assert.ok(lastUploadPinned(), `${bytes} B`);
      assert.deepEqual(readInts(buffer, values.length), values);
      buffer.release();
    }
    const large = new Uint8Array(STAGED_MAX_BYTES + 4).fill(9);
    const buffer = copyToDevice(large);
    assert.ok(!lastUploadPinned());
    buffer.release();
  });

  it('one upload is one copy: no event, no wait, no allocation from the driver once the ring exists', () => {
    copyInt32ToDevice(Int32Array.of(1)).release();
    const { calls } = libraryCallsDuring(dir, () => copyInt32ToDevice(Int32Array.of(2)).release());
    assert.deepEqual(calls, { cuMemcpyHtoDAsync_v2: 1 });
  });

  it('every upload arrives intact over laps of the ring, each segment waited on a lap after it was left', () => {
    const before = { ...stagingStats };
    // 16-byte uploads: 4,096 a 64 KiB segment, 65,536 a lap of 16 segments; 70,000 make one lap and more.
    const uploads = 70_000;
    const { calls } = libraryCallsDuring(dir, () => {
      for (let i = 0; i < uploads; i++) {
        const values = Int32Array.of(i, -i, i ^ 0x5a5a, 7);
        const buffer = copyInt32ToDevice(values);
        if (i % 997 === 0) assert.deepEqual(readInts(buffer, 4), values, `upload ${i}`);
        buffer.release();
      }
    });
    const left = stagingStats.segmentsLeft - before.segmentsLeft;
    const waits = stagingStats.waits - before.waits;
    assert.ok(left >= 17 && left <= 18, `segments left: ${left}`);
    assert.equal(calls.cuEventRecord, left);
    // A segment is waited on from its second entry: entries after the first 15 segment changes (16 segments).
    const lapped = (segmentsLeft: number) => Math.max(0, segmentsLeft - 15);
    assert.equal(waits, lapped(stagingStats.segmentsLeft) - lapped(before.segmentsLeft));
    assert.equal(calls.cuEventSynchronize ?? 0, waits);
    assert.equal(calls.cuMemcpyHtoDAsync_v2, uploads);
  });
});
