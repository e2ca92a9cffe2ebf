/**
 * What one repeated attention call asks of the CUDA driver and cuDNN, pinned, on the stand-in device
 * (test/fake-device/cudnn-fake.c counts every call by name): at the codelab's shape (B=4 T=128 N=8 H=64
 * bf16) a flash call is one cuLaunchKernel, a cudnn call one cuGraphLaunch of its plan's CUDA graph (and
 * the NaN repair's launch where a mask can hide keys), `auto` exactly its backend's; a B=1 decode step one
 * cuGraphLaunch of its split kernel and combine, captured; a KVCache step (append, then attention) one
 * upload of the grown lengths and the append's slots together (from page-locked staging), the append kernel's
 * graph launch and the decode kernels' graph launch; a flash backward one graph launch of its three kernels;
 * a naive call a cuBLASLt matmul per batch entry and product and the softmax, its
 * matmuls and softmax as one graph launch under ATTNLAB_LAUNCH_GRAPH=all. No call allocates from the driver, waits on the device, builds a
 * descriptor or loads a module once its shape ran: each of those costs 2–20 µs of host time on an H100
 * (docs/internals/host-time.md). And what is kept per shape is found again only where it still holds:
 * cudnn binds each call's own tensors, a decode plan follows decodeTuning, the shape and the kernel rules'
 * cached-token thresholds.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import koffi from 'koffi';
import { attention } from '../../src/api/attention.js';
import { attentionBackward } from '../../src/api/backward.js';
import { KVCache } from '../../src/api/kv-cache.js';
import { decodeTuning } from '../../src/backends/cuda/flash/decode/decode-splits.js';
import { clearInt32Cache, int32Uploads } from '../../src/backends/cuda/runtime/int32-cache.js';
import { memoryStats } from '../../src/backends/cuda/runtime/memory.js';
import type { Implementation } from '../../src/backends/problem.js';
import { seededInput } from '../../src/bench/measure.js';
import { reloadConfig } from '../../src/config.js';
import { tidy } from '../../src/tensor/scope.js';
import { Tensor } from '../../src/tensor/tensor.js';
import { withLaunchGraph } from '../support/launch-graph-env.js';
import { libraryCallsDuring, useFakeCudaStack } from './fake-cuda.js';

const { dir, skip } = useFakeCudaStack('attnlab-host-calls-');

function inputs(B: number, T: number, S: number, N: number, K: number, H: number): Tensor[] {
  return [
    [T, N, 1],
    [S, K, 2],
    [S, K, 3],
  ].map(([length, heads, seed]) => seededInput([B, length, heads, H], seed, 'bfloat16').to('cuda'));
}

/** The library calls and driver allocations of `call` after `warm` untimed calls of it. */
function repeated(call: () => { dispose(): void }, warm = 3) {
  for (let i = 0; i < warm; i++) call().dispose();
  const allocations = memoryStats().driverAllocations;
  const { calls, result } = libraryCallsDuring(dir, call);
  result.dispose();
  return { calls, allocations: memoryStats().driverAllocations - allocations };
}

describe('the library calls of a repeated attention call', { skip }, () => {
  const small = skip ? [] : inputs(4, 128, 128, 8, 8, 64);
  const step = skip ? [] : inputs(1, 1, 4096, 32, 8, 128);
  const run = (impl: Implementation | undefined, [q, k, v]: Tensor[], isCausal: boolean) => {
    let backend = '';
    const found = repeated(() => {
      const r = attention(q, k, v, { isCausal, implementation: impl });
      backend = r.backend;
      return r.output;
    });
    return { ...found, backend };
  };

  it('flash: one launch, at B=4 T=128 N=8 H=64, causal or not', () => {
    for (const causal of [false, true]) {
      const { calls, allocations } = run('flash', small, causal);
      assert.deepEqual(calls, { cuLaunchKernel: 1 }, `causal ${causal}`);
      assert.equal(allocations, 0);
    }
  });

  it("cudnn: one graph launch, and the NaN repair's launch where the mask can hide keys", () => {
    const plain = run('cudnn', small, false);
    assert.deepEqual(plain.calls, { cuGraphLaunch: 1 });
    const causal = run('cudnn', small, true);
    assert.deepEqual(causal.calls, { cuGraphLaunch: 1, cuLaunchKernel: 1 });
    assert.equal(plain.allocations + causal.allocations, 0);
  });

  it("cudnn: a kept plan and variant pack bind each call's own tensors", () => {
    const lastExecute = koffi.load(join(dir, 'libcudnn.so.9')).func('const char *fake_last_execute()');
    const bound = () =>
      Object.values(JSON.parse(lastExecute() as string) as Record<string, { ptr: string }>).map((b) =>
        BigInt(b.ptr),
      );
    const [q, k, v] = small;
    const [q2, k2, v2] = inputs(4, 128, 128, 8, 8, 64);
    for (const [query, key, value] of [
      [q, k, v],
      [q2, k2, v2],
      [q, k2, v],
    ]) {
      const r = attention(query, key, value, { isCausal: true, implementation: 'cudnn' });
      const pointers = bound();
      for (const t of [query, key, value, r.output])
        assert.ok(pointers.includes(t.buffer.ptr), `bound ${t.buffer.ptr.toString(16)}`);
      r.output.dispose();
    }
    for (const t of [q2, k2, v2]) t.dispose();
  });

  it('naive under ATTNLAB_LAUNCH_GRAPH=all: its matmuls and softmax as one graph launch once a call repeats, MHA and GQA', () => {
    withLaunchGraph('all', () => {
      for (const causal of [false, true]) {
        const { calls, allocations } = run('naive', small, causal);
        // Causal: the NaN repair's launch after the group (a masked key's 0 · V row can be NaN).
        assert.deepEqual(calls, causal ? { cuGraphLaunch: 1, cuLaunchKernel: 1 } : { cuGraphLaunch: 1 });
        assert.equal(allocations, 0);
      }
      const launches = koffi.load(join(dir, 'libcuda.so.1')).func('int fake_launch_count()');
      const gqa = inputs(2, 128, 128, 8, 2, 64);
      const before = launches() as number;
      assert.deepEqual(run('naive', gqa, false).calls, { cuGraphLaunch: 1 });
      // One strided batch of G = 4 query heads per (b, KV head) and matmul: 2·B·K + 1 = 9 kernels a call, 4 calls.
      assert.equal((launches() as number) - before, 9 * 4);
      for (const t of gqa) t.dispose();
    });
  });

  it('naive under ATTNLAB_LAUNCH_GRAPH=all with padding lengths: the two length arrays keep their addresses, so a repeat is one graph launch', () =>
    withLaunchGraph('all', () => {
      const gqa = inputs(3, 100, 260, 8, 2, 128);
      const [q, k, v] = gqa;
      const options = {
        implementation: 'naive' as const,
        isCausal: true,
        causalAlignment: 'bottom_right' as const,
        querySeqLengths: [100, 37, 1],
        keyValueSeqLengths: [260, 90, 0],
      };
      const { calls } = repeated(() => attention(q, k, v, options).output);
      // The lengths' uploads, then the group as one graph launch, then the NaN repair (rows that see no key).
      assert.equal(calls.cuGraphLaunch, 1, JSON.stringify(calls));
      assert.equal(calls.cublasLtMatmul, undefined, JSON.stringify(calls));
      for (const t of gqa) t.dispose();
    }));

  it('naive by default (and with ATTNLAB_LAUNCH_GRAPH=1 or 0): one cuBLASLt matmul per batch entry and product, and the softmax', () => {
    for (const value of [undefined, '1', '0'])
      withLaunchGraph(value, () => {
        const { calls } = run('naive', small, false);
        // B = 4: 4 matmuls for the scores, 4 for the output, each a launch, and the softmax's.
        assert.deepEqual(calls, { cublasLtMatmul: 8, cuLaunchKernel: 9 }, `ATTNLAB_LAUNCH_GRAPH=${value}`);
      });
  });

  it("naive under ATTNLAB_LAUNCH_GRAPH=all: a call whose scale or buffers differ from the graph's runs its own launches", () =>
    withLaunchGraph('all', () => {
      const [q, k, v] = small;
      const call = (scale: number, query = q) =>
        attention(query, k, v, { implementation: 'naive', scale }).output;
      for (let i = 0; i < 3; i++) call(0.125).dispose();
      assert.deepEqual(libraryCallsDuring(dir, () => call(0.125).dispose()).calls, { cuGraphLaunch: 1 });
      const rescaled = libraryCallsDuring(dir, () => call(0.5).dispose()).calls;
      assert.deepEqual(rescaled, { cublasLtMatmul: 8, cuLaunchKernel: 9 }, 'another scale');
      const [q2] = inputs(4, 128, 128, 8, 8, 64);
      const moved = libraryCallsDuring(dir, () => call(0.125, q2).dispose()).calls;
      assert.deepEqual(moved, { cublasLtMatmul: 8, cuLaunchKernel: 9 }, 'another query buffer');
      q2.dispose();
    }));

  it("auto: its backend's calls and nothing more", () => {
    for (const causal of [false, true]) {
      const auto = run(undefined, small, causal);
      const named = run(auto.backend as Implementation, small, causal);
      assert.deepEqual(auto.calls, named.calls, `${auto.backend}, causal ${causal}`);
      assert.equal(auto.allocations, 0);
    }
  });

  it('flash backward at B=4 T=128 N=8 H=64, causal: under ATTNLAB_LAUNCH_GRAPH=all its prep, dK/dV loop and dQ conversion as one graph launch once a call repeats (three launches by default or under =1)', () => {
    process.env.ATTNLAB_LAUNCH_GRAPH = 'all';
    reloadConfig();
    const [q, k, v] = small;
    const f = attention(q, k, v, { isCausal: true, returnLogSumExp: true, implementation: 'flash' });
    const [dOut] = inputs(4, 128, 128, 8, 8, 64);
    const launches = koffi.load(join(dir, 'libcuda.so.1')).func('int fake_launch_count()');
    const backward = (deterministic: boolean) => {
      const r = attentionBackward(q, k, v, f.output, f.logSumExp as Tensor, dOut, {
        isCausal: true,
        implementation: 'flash',
        deterministic,
      });
      // Freed in their order (dQuery, dKey, then dValue by repeated()): the next call gets the same blocks back.
      r.dQuery.dispose();
      r.dKey.dispose();
      return r.dValue;
    };
    for (const deterministic of [false, true]) {
      const before = launches() as number;
      const { calls, allocations } = repeated(() => backward(deterministic));
      assert.deepEqual(calls, { cuGraphLaunch: 1 }, `deterministic ${deterministic}`);
      assert.equal(allocations, 0);
      assert.equal((launches() as number) - before, 3 * 4, 'each of the 4 calls ran its three kernels');
    }
    for (const setting of [undefined, '1']) {
      const plain = withLaunchGraph(setting, () => repeated(() => backward(false)));
      assert.deepEqual(plain.calls, { cuLaunchKernel: 3 }, `ATTNLAB_LAUNCH_GRAPH=${setting}`);
    }
    process.env.ATTNLAB_LAUNCH_GRAPH = 'all';
    reloadConfig();
    // Another dOutput: another signature, so its first call launches its kernels one by one.
    const [dOut2] = inputs(4, 128, 128, 8, 8, 64);
    const moved = libraryCallsDuring(dir, () => {
      const r = attentionBackward(q, k, v, f.output, f.logSumExp as Tensor, dOut2, {
        isCausal: true,
        implementation: 'flash',
      });
      for (const t of [r.dQuery, r.dKey, r.dValue]) t.dispose();
    }).calls;
    assert.equal(moved.cuLaunchKernel, 3, `another dOutput buffer: ${JSON.stringify(moved)}`);
    assert.equal(moved.cuGraphLaunch, undefined, `another dOutput buffer: ${JSON.stringify(moved)}`);
    for (const t of [dOut, dOut2, f.output, f.logSumExp as Tensor]) t.dispose();
    delete process.env.ATTNLAB_LAUNCH_GRAPH;
    reloadConfig();
  });

  it('a training step in a tidy scope (forward, then backward, its tensors freed in creation order): under ATTNLAB_LAUNCH_GRAPH=all the backward one graph launch once the blocks cycle', () =>
    withLaunchGraph('all', () => {
      const [q, k, v] = small;
      const [dOut] = inputs(4, 128, 128, 8, 8, 64);
      // The forward's output, dQ, dK and dV are of one size: freed in creation order, the pool hands them out
      // rotated by one each step, a cycle of four arrangements, each of which keeps its own graph.
      const step = () =>
        tidy(() => {
          const f = attention(q, k, v, { isCausal: true, returnLogSumExp: true, implementation: 'flash' });
          attentionBackward(q, k, v, f.output, f.logSumExp as Tensor, dOut, {
            isCausal: true,
            implementation: 'flash',
          });
        });
      for (let i = 0; i < 12; i++) step();
      for (let i = 0; i < 4; i++) {
        const { calls } = libraryCallsDuring(dir, step);
        assert.deepEqual(
          calls,
          { cuLaunchKernel: 1, cuGraphLaunch: 1 },
          `step ${i}: the forward's launch, the backward's graph`,
        );
      }
      dOut.dispose();
    }));

  it('a B=1 decode step over a dense cache (S=4096 K=8 N=32 H=128): one graph launch on flash (the split kernel and the combine) and on cudnn', () => {
    const launches = koffi.load(join(dir, 'libcuda.so.1')).func('int fake_launch_count()');
    const before = launches() as number;
    const flash = run('flash', step, false);
    assert.deepEqual(flash.calls, { cuGraphLaunch: 1 }, 'the split kernel and the combine, captured');
    assert.equal((launches() as number) - before, 2 * 4, 'each of the 4 calls ran both kernels');
    assert.deepEqual(run('cudnn', step, false).calls, { cuGraphLaunch: 1 });
    const auto = run(undefined, step, false);
    assert.deepEqual(auto.calls, run(auto.backend as Implementation, step, false).calls);
    assert.equal(flash.allocations + auto.allocations, 0);
  });

  it('a decode plan is kept per shape and follows decodeTuning set in place', () => {
    const [q, k, v] = step;
    const label = () => {
      const r = attention(q, k, v, { implementation: 'flash' });
      r.output.dispose();
      return r.variant;
    };
    const plain = label();
    try {
      decodeTuning.splits = 2;
      assert.match(label(), /\.split2$/);
      decodeTuning.splits = 3;
      assert.match(label(), /\.split3$/);
    } finally {
      delete decodeTuning.splits;
    }
    assert.equal(label(), plain);
    const [, k2, v2] = inputs(1, 1, 2048, 32, 8, 128);
    const shorter = attention(q, k2, v2, { implementation: 'flash' });
    assert.equal(shorter.output.shape.join(), '1,1,32,128');
    shorter.output.dispose();
    assert.equal(label(), plain, 'the first shape again');
    for (const t of [k2, v2]) t.dispose();
  });

  it("a kept paged decode plan follows the kernel rules' cached-token thresholds as the lengths grow", () => {
    // K=1, 32 query rows a kv head: the row-tile kernel below 32k cached tokens, the TMA kernel from there.
    const pool = Tensor.zeros([1024, 64, 1, 128], 'bfloat16').to('cuda');
    const q = Tensor.zeros([1, 1, 32, 128], 'bfloat16').to('cuda');
    const blockTable = [Array.from({ length: 1024 }, (_, i) => i)];
    const label = (length: number) => {
      const r = attention(q, pool, pool, {
        blockTable,
        keyValueSeqLengths: [length],
        isCausal: true,
        causalAlignment: 'bottom_right',
        implementation: 'flash',
      });
      r.output.dispose();
      return r.variant;
    };
    const short = label(1000);
    assert.match(short, /^flash-decode\./);
    assert.match(label(40_000), /^flash-decode-tma\./);
    assert.equal(label(1001), short);
    for (const t of [pool, q]) t.dispose();
  });

  it('a KVCache decode step: append uploads its slots with the lengths the step reads and launches once (as a graph under ATTNLAB_LAUNCH_GRAPH=all); attention uploads nothing and launches the decode kernels as one graph', () => {
    const lastUploadPinned = koffi.load(join(dir, 'libcuda.so.1')).func('int fake_last_upload_pinned()');
    const cache = new KVCache({ numBlocks: 256, blockSize: 64, numKvHeads: 8, headDim: 128 });
    const id = cache.addSequence();
    const [q] = inputs(1, 1, 1, 32, 32, 128);
    const [row] = inputs(1, 1, 1, 8, 8, 128);
    const prefill = seededInput([1, 1000, 8, 128], 4, 'bfloat16').to('cuda');
    cache.append([id], prefill, prefill);
    for (const impl of [undefined, 'flash'] as const) {
      const decodeStep = () => {
        cache.append([id], row, row);
        return cache.attention(q, [id], { implementation: impl }).output;
      };
      // 40 steps: the kept uploads (int32-cache.ts keeps 16) have cycled and the pool serves them.
      const { calls, allocations } = repeated(decodeStep, 40);
      assert.deepEqual(
        calls,
        { cuMemcpyHtoDAsync_v2: 1, cuLaunchKernel: 1, cuGraphLaunch: 1 },
        `${impl ?? 'auto'}: the grown lengths and the append's slots, its launch, the decode's split and combine as a graph`,
      );
      assert.equal(allocations, 0);
      assert.equal(lastUploadPinned(), 1, 'the uploads come from page-locked staging (runtime/staging.ts)');
      const all = withLaunchGraph('all', () => repeated(decodeStep, 5));
      assert.deepEqual(
        all.calls,
        { cuMemcpyHtoDAsync_v2: 1, cuGraphLaunch: 2 },
        `${impl ?? 'auto'}, ATTNLAB_LAUNCH_GRAPH=all: the append's launch as a graph too`,
      );
    }
    cache.dispose();
  });

  it("a KVCache step reading other sequences than the lengths its append wrote uploads its own lengths, then finds the append's again", () => {
    const cache = new KVCache({ numBlocks: 64, blockSize: 16, numKvHeads: 8, headDim: 128 });
    const [a, b] = [cache.addSequence(), cache.addSequence()];
    const [q1] = inputs(1, 1, 1, 32, 32, 128);
    const [q2] = inputs(2, 1, 1, 32, 32, 128);
    const [row] = inputs(1, 1, 1, 8, 8, 128);
    const [rows] = inputs(2, 1, 1, 8, 8, 128);
    // Uploads of a step but the block table's (a new table where the sequences read change).
    const step = (appendTo: number[], read: number[]) => {
      const tables = int32Uploads();
      const { calls } = libraryCallsDuring(dir, () => {
        cache.append(appendTo, appendTo.length === 1 ? row : rows, appendTo.length === 1 ? row : rows);
        cache.attention(read.length === 1 ? q1 : q2, read, { implementation: 'flash' }).output.dispose();
      });
      return (calls.cuMemcpyHtoDAsync_v2 ?? 0) - (int32Uploads() - tables);
    };
    for (let i = 0; i < 5; i++) step([a, b], [a, b]);
    assert.equal(step([a, b], [a, b]), 1, 'the lengths came with the slots');
    // The append writes [a, b]'s lengths (the last step's sequences); a step over [b] reads others.
    assert.equal(step([b], [b]), 2, "another step's lengths: the decode's own upload");
    // Now [b] was read last: the append writes b's length, and the step finds it.
    assert.equal(step([b], [b]), 1);
    assert.equal(step([a], [b]), 1, "b's length, unchanged by an append to a, written with a's slot");
    for (const t of [q1, q2, row, rows]) t.dispose();
    cache.dispose();
  });

  it('a KVCache decode loop uploads its block table again only at the step that takes a new block', () => {
    // The kept uploads are found by content: another test's table of the same entries would be found.
    clearInt32Cache();
    const cache = new KVCache({ numBlocks: 64, blockSize: 16, numKvHeads: 8, headDim: 128 });
    const id = cache.addSequence();
    const [q] = inputs(1, 1, 1, 32, 32, 128);
    const [row] = inputs(1, 1, 1, 8, 8, 128);
    const uploads: number[] = [];
    for (let step = 0; step < 40; step++) {
      const before = int32Uploads();
      cache.append([id], row, row);
      cache.attention(q, [id], { implementation: 'flash' }).output.dispose();
      uploads.push(int32Uploads() - before);
    }
    // Steps 0, 16 and 32 take a block (a new table); every other step finds its table's upload at once.
    const at = uploads.flatMap((n, step) => (n > 0 ? [step] : []));
    assert.deepEqual(at, [0, 16, 32]);
    for (const t of [q, row]) t.dispose();
    cache.dispose();
  });
});
