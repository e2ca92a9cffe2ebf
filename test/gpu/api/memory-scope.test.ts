/**
 * tidy() on the GPU: loops of attention calls that never call dispose() keep device memory flat —
 * 100,000 cudnn calls and 20,000 flash calls (tiny shapes, so the host decides the time: ~26 µs a
 * cudnn call on the H200, a few seconds each loop), and 2,000 FP8 steps of the TE module. The
 * counters are read after a warm-up call (which builds plans and fills the pool) and must not move.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { cudaAvailable, getCudaContext } from '../../../src/backends/cuda/runtime/context.js';
import {
  attention,
  autocast,
  DelayedScaling,
  DotProductAttention,
  type Implementation,
  type MemoryStats,
  memoryStats,
  randomNormal,
  tidy,
} from '../../../src/index.js';

const cuda = cudaAvailable();
const skip = cuda.ok ? false : `no CUDA device: ${cuda.reason}`;

const held = (s: MemoryStats) => ({
  liveBlocks: s.liveBlocks,
  currentBytes: s.currentBytes,
  driverAllocations: s.driverAllocations,
  hostBlocks: s.hostBlocks,
  hostBytes: s.hostBytes,
});

function flatLoop(implementation: Implementation, calls: number): void {
  const [B, T, N, H] = [1, 16, 2, 64];
  const q = randomNormal([B, T, N, H], { seed: 1, dtype: 'bfloat16' }).to('cuda');
  const k = randomNormal([B, T, N, H], { seed: 2, dtype: 'bfloat16' }).to('cuda');
  const call = (i: number) =>
    tidy(() => {
      // No dispose(): the output, the log-sum-exp and its host copy are all the scope's to free.
      const r = attention(q, k, k, { implementation, returnLogSumExp: true, isCausal: i % 2 === 0 });
      r.logSumExp?.toHost();
    });
  call(0);
  call(1);
  const start = held(memoryStats());
  const started = performance.now();
  for (let i = 0; i < calls; i++) {
    call(i);
    if (i % 25_000 === 0)
      assert.deepEqual(held(memoryStats()), start, `after ${i + 1} ${implementation} calls`);
  }
  const end = held(memoryStats());
  console.log(
    `# ${calls} ${implementation} calls in tidy: ${(((performance.now() - started) * 1000) / calls).toFixed(1)} µs each; ` +
      JSON.stringify(end),
  );
  assert.deepEqual(end, start);
  q.dispose();
  k.dispose();
}

describe('tidy keeps device memory flat', { skip, timeout: 120_000 }, () => {
  it('100,000 cudnn calls with no dispose()', () => flatLoop('cudnn', 100_000));

  it('20,000 flash calls with no dispose()', () => flatLoop('flash', 20_000));

  it('2,000 FP8 steps of the TE module (sm_90): at most the 64 unread scale reports above the start', (t) => {
    const { major } = getCudaContext().properties.computeCapability;
    if (major < 9) {
      t.skip(`FP8 attention needs sm_90, this GPU is sm_${major}x`);
      return;
    }
    const attn = new DotProductAttention({ headDim: 64, numAttentionHeads: 2 });
    const x = randomNormal([1, 64, 2, 64], { seed: 3, dtype: 'bfloat16' }).to('cuda');
    const recipe = new DelayedScaling({ amaxHistoryLen: 16 });
    const step = () =>
      tidy(() => {
        const r = autocast({ recipe }, () => attn.apply(x, x, x, { keepFp8Output: true }));
        assert.equal(r.precision, 'fp8');
      });
    step();
    const start = memoryStats();
    for (let i = 0; i < 2_000; i++) {
      step();
      const now = memoryStats();
      assert.ok(
        now.liveBlocks <= start.liveBlocks + 64,
        `step ${i}: ${now.liveBlocks} blocks, ${start.liveBlocks} at the start`,
      );
      assert.equal(now.hostBlocks, start.hostBlocks);
    }
    x.dispose();
  });
});
