/**
 * tidy() with "cuda" tensors on a machine without a GPU, against the stand-in libcuda/libcudnn of
 * test/fake-device/cudnn-fake.c (its cuMemAlloc is malloc; cuDNN's execute records bindings and runs
 * nothing). What is checked is the pool's bookkeeping, which is what a GPU loop depends on: every
 * block a tidy scope took is back in the pool when it ends, the pool asks the driver for nothing new
 * after the first call, and what the scope returns (or keep() holds) stays allocated.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  attention,
  keep,
  type MemoryStats,
  memoryStats,
  randomNormal,
  Tensor,
  tidy,
} from '../../src/index.js';
import { useFakeCudaStack } from './fake-cuda.js';

delete process.env.ATTNLAB_DISABLE_CUDA;
const { skip } = useFakeCudaStack('attnlab-fake-scope-', { cudnnGraph: true });

const device = (s: MemoryStats) => ({
  liveBlocks: s.liveBlocks,
  currentBytes: s.currentBytes,
  driverAllocations: s.driverAllocations,
});

describe('tidy on the device pool (stand-in driver)', { skip }, () => {
  it('frees device blocks at the end of the scope, keeps the returned ones', () => {
    const host = Tensor.zeros([64], 'float32');
    const before = device(memoryStats());
    let inner!: Tensor;
    const out = tidy(() => {
      inner = host.to('cuda');
      return host.to('cuda').reshape([8, 8]);
    });
    assert.equal(inner.disposed, true);
    assert.equal(out.disposed, false);
    assert.equal(memoryStats().liveBlocks, before.liveBlocks + 1);
    const held = tidy(() => keep(host.to('cuda')));
    assert.equal(memoryStats().liveBlocks, before.liveBlocks + 2);
    out.dispose();
    held.dispose();
    assert.equal(memoryStats().liveBlocks, before.liveBlocks);
  });

  it('10,000 cudnn calls with log-sum-exp and host copies hold the pool flat, with no dispose()', () => {
    const q = randomNormal([1, 16, 2, 64], { seed: 1, dtype: 'bfloat16' }).to('cuda');
    const call = (i: number) =>
      tidy(() => {
        const r = attention(q, q, q, {
          implementation: 'cudnn',
          returnLogSumExp: true,
          isCausal: i % 2 === 0,
        });
        assert.equal(r.backend, 'cudnn');
        r.output.toHost();
      });
    call(0);
    call(1);
    const start = device(memoryStats());
    const host = memoryStats().hostBlocks;
    for (let i = 0; i < 10_000; i++) call(i);
    assert.deepEqual(device(memoryStats()), start);
    assert.equal(memoryStats().hostBlocks, host);
    q.dispose();
  });
});
