/**
 * Where the driver refuses page-locked memory (a locked-memory limit: the stand-in's FAKE_CUDA_HOST_ALLOC=refuse),
 * small uploads go from pageable memory as without staging, intact, and ATTNLAB_DEBUG=1 says so once
 * (src/backends/cuda/runtime/staging.ts). Its own process: the ring is made, or refused, at the first upload.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import koffi from 'koffi';
import { copyInt32ToDevice, copyToHost } from '../../src/backends/cuda/runtime/memory.js';
import { stagingStats } from '../../src/backends/cuda/runtime/staging.js';
import { reloadConfig } from '../../src/config.js';
import { useFakeCudaStack } from './fake-cuda.js';

const { dir, skip } = useFakeCudaStack('attnlab-staging-refused-');

describe('small uploads without page-locked memory', { skip }, () => {
  it('go from pageable memory, intact, and ATTNLAB_DEBUG=1 says why once', () => {
    const pinned = koffi.load(join(dir, 'libcuda.so.1')).func('int fake_last_upload_pinned()');
    const said: string[] = [];
    const error = console.error;
    process.env.FAKE_CUDA_HOST_ALLOC = 'refuse';
    process.env.ATTNLAB_DEBUG = '1';
    reloadConfig();
    console.error = (...args: unknown[]) => said.push(args.join(' '));
    try {
      for (let i = 0; i < 3; i++) {
        const values = Int32Array.of(i, 7, -i);
        const buffer = copyInt32ToDevice(values);
        assert.equal(pinned(), 0);
        const back = new Int32Array(3);
        copyToHost(buffer, new Uint8Array(back.buffer));
        assert.deepEqual(back, values);
        buffer.release();
      }
    } finally {
      console.error = error;
      delete process.env.FAKE_CUDA_HOST_ALLOC;
      delete process.env.ATTNLAB_DEBUG;
      reloadConfig();
    }
    assert.equal(stagingStats.staged, 0);
    assert.equal(said.filter((line) => line.includes('no page-locked staging')).length, 1, said.join('\n'));
  });
});
