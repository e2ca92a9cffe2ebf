/**
 * The webgpu device: tensors to and from it, memory accounting, the limits checked before a
 * dispatch (typed refusals naming the limit), device loss (a typed error, then recovery), the
 * backend's choice by `auto` and its refusals. Runs on a software adapter in CI; skips, saying
 * why, where no WebGPU device opens. initWebgpu's bad options need no device.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { describe, it } from 'node:test';
import { attention } from '../../../../src/api/attention.js';
import { KVCache } from '../../../../src/api/kv-cache.js';
import { memoryStats } from '../../../../src/api/memory.js';
import { validateAttention } from '../../../../src/api/validate.js';
import { createTensorBuffer } from '../../../../src/backends/webgpu/memory.js';
import {
  DECODE_MAX_LANES,
  DECODE_TARGET_WORKGROUPS,
  matrixShape,
  planForward,
} from '../../../../src/backends/webgpu/plan.js';
import { initWebgpu, webgpuContext } from '../../../../src/backends/webgpu/runtime.js';
import { sgmatStorageBytes } from '../../../../src/backends/webgpu/sgmat-source.js';
import { variantKey } from '../../../../src/backends/webgpu/variant.js';
import { measureWebgpuCase } from '../../../../src/bench/webgpu-measure.js';
import { DeviceError, InvalidArgumentError, UnsupportedError } from '../../../../src/errors.js';
import { randomNormal } from '../../../../src/tensor/random.js';
import { Tensor } from '../../../../src/tensor/tensor.js';
import { assertMatchesOracle } from '../../../support/backend-suite.js';
import { pack, pagedCopy, sliceRows, unpack } from '../../../support/kv-layouts.js';
import { webgpuSkipReason } from '../../../support/webgpu.js';

describe('initWebgpu options', () => {
  const cases: [unknown, string][] = [
    [5, 'options'],
    [{ gpu: {} }, 'options.gpu'],
    [{ dawnOptions: 'backend=vulkan' }, 'options.dawnOptions'],
    [{ powerPreference: 'fast' }, 'options.powerPreference'],
    [{ powerPrefernce: 'low-power' }, 'options'],
    [{ experimental: 'yes' }, 'options.experimental'],
    [{ dawnToggles: 'use_vulkan_memory_model' }, 'options.dawnToggles'],
    [{ dawnToggles: ['a,b'] }, 'options.dawnToggles'],
  ];
  for (const [options, argument] of cases) {
    it(`refuses ${JSON.stringify(options)} naming ${argument}`, async () => {
      await assert.rejects(initWebgpu(options as never), (e: unknown) => {
        assert.ok(e instanceof InvalidArgumentError, String(e));
        assert.equal(e.argument, argument);
        return true;
      });
    });
  }
});

// The plan needs no device: NVIDIA's Vulkan limits, with and without an f16 subgroup-matrix shape.
describe('the forward plan on subgroup matrices', () => {
  const limits = {
    maxBufferSize: 2 ** 40,
    maxStorageBufferBindingSize: 2 ** 31 - 4,
    maxComputeWorkgroupStorageSize: 49152,
    maxComputeInvocationsPerWorkgroup: 1024,
    maxComputeWorkgroupsPerDimension: 65535,
    maxStorageBuffersPerShaderStage: 16,
  };
  const nvidia = { subgroupMatrix: { M: 16, N: 16, K: 16 }, subgroupSizes: { min: 32, max: 32 } };
  const matrix = matrixShape(nvidia);
  const plan = (dtype: 'float16' | 'float32', T: number, H: number, m = matrix) => {
    const q = randomNormal([1, T, 2, H], { seed: 4, dtype });
    return planForward(validateAttention(q, q, q, { isCausal: true }), limits, undefined, true, true, m);
  };

  it('takes one subgroup size and an f16 shape, or none', () => {
    assert.deepEqual(matrix, { M: 16, N: 16, K: 16, sg: 32 });
    assert.equal(matrixShape({ ...nvidia, subgroupSizes: { min: 16, max: 32 } }), null);
    assert.equal(matrixShape({ ...nvidia, subgroupMatrix: null }), null);
  });

  it('runs float16 prefill on it (64 rows, 64 keys a tile at H=128 in 44 KiB), and the tiled kernel otherwise', () => {
    const fast = plan('float16', 256, 128);
    assert.ok(fast.ok);
    assert.equal(fast.variant.kernel, 'sgmat');
    assert.equal(fast.variant.rows, 64);
    assert.equal(fast.variant.bc, 64);
    assert.ok(sgmatStorageBytes(128, 128, 64, matrix as NonNullable<typeof matrix>) <= 49152);
    assert.match(
      variantKey(fast.variant),
      /^webgpu-flash-sgmat16x16x16s32-float16-h128-hv128-r64-c64-causal/,
    );
    const cases: [string, ReturnType<typeof plan>][] = [
      ['float32 inputs', plan('float32', 256, 128)],
      ['a decode step (T ≤ 16)', plan('float16', 1, 128)],
      ['H past 128', plan('float16', 256, 256)],
      ['H not a multiple of K=16', plan('float16', 256, 40)],
      ['no subgroup matrices', plan('float16', 256, 128, null)],
    ];
    for (const [what, p] of cases) {
      assert.ok(p.ok, what);
      assert.notEqual(p.variant.kernel, 'sgmat', what);
    }
  });
});

describe('the forward plan for decode steps', () => {
  const limits = {
    maxBufferSize: 2 ** 40,
    maxStorageBufferBindingSize: 2 ** 31 - 4,
    maxComputeWorkgroupStorageSize: 49152,
    maxComputeInvocationsPerWorkgroup: 1024,
    maxComputeWorkgroupsPerDimension: 65535,
    maxStorageBuffersPerShaderStage: 16,
  };
  const plan = (T: number, sg: number | null, options: Record<string, unknown> = {}) => {
    // B=2, N=32 query heads on K=8 KV heads, H=128, S=4096 (the shapes only: float16 zeros).
    const q = Tensor.zeros([2, T, 32, 128], 'float16');
    const k = Tensor.zeros([2, 4096, 8, 128], 'float16');
    return planForward(validateAttention(q, k, k, options), limits, undefined, true, true, null, sg);
  };

  it('reads each key row with 8 invocations at H=128 float16, the 4 query heads of a KV head in one workgroup, chunks of ≥ 256 keys', () => {
    const p = plan(1, 32);
    assert.ok(p.ok);
    assert.equal(p.variant.kernel, 'decode');
    assert.deepEqual(p.variant.decode, { sg: 32, lk: 8, rows: 4 });
    // 2 batches × 8 KV heads × 1 row group = 16 workgroups want 128 chunks for ~2,000 workgroups;
    // 4,096 keys give 16 chunks of the fewest keys a chunk keeps (256).
    assert.equal(p.splits, 16);
    assert.match(variantKey(p.variant), /^webgpu-flash-decode-s32-float16-h128-hv128-r4-c8-split/);
    // Two query rows per head: 8 rows a workgroup.
    const two = plan(2, 32);
    assert.ok(two.ok && two.variant.kernel === 'decode' && two.variant.rows === 8);
  });

  it('picks 8 lanes a key row and 32 key chunks at B=8 S=32k K=8 N=32 H=128 float16 (the fastest layout measured on an H100)', () => {
    const q = Tensor.zeros([8, 1, 32, 128], 'float16');
    const k = Tensor.zeros([8, 32768, 8, 128], 'float16');
    const p = planForward(validateAttention(q, k, k), limits, undefined, true, true, null, 32);
    assert.ok(p.ok && p.variant.kernel === 'decode');
    assert.equal(DECODE_MAX_LANES, 8);
    assert.equal(DECODE_TARGET_WORKGROUPS, 2048);
    assert.deepEqual(p.variant.decode, { sg: 32, lk: 8, rows: 4 });
    // 8 batches × 8 KV heads = 64 workgroups a chunk: 32 chunks make 2,048.
    assert.equal(p.splits, 32);
    // Lanes stay within the subgroup (SwiftShader's 4) and divide the row (H=32 float16: 4 units).
    const narrow = plan(1, 4);
    assert.ok(narrow.ok && narrow.variant.kernel === 'decode');
    assert.equal(narrow.variant.decode?.lk, 4);
  });

  it('leaves bias, boolean masks, more than 16 rows and adapters without one subgroup size to the other kernels', () => {
    const bias = Tensor.zeros([1, 1, 1, 4096], 'float16');
    const cases: [string, ReturnType<typeof plan>][] = [
      ['no subgroup size', plan(1, null)],
      ['T = 17', plan(17, 32)],
      ['a bias', plan(1, 32, { bias })],
    ];
    for (const [what, p] of cases) {
      assert.ok(p.ok, what);
      assert.notEqual(p.variant.kernel, 'decode', what);
    }
  });
});

const skip = await webgpuSkipReason();

describe('webgpu device', { skip: skip ?? false }, () => {
  it('round-trips every dtype through the device, odd byte counts included', async () => {
    for (const dtype of ['float32', 'float16', 'bfloat16', 'int32', 'float8_e4m3fn'] as const) {
      const host = Tensor.fromArray([1, -2, 3.5, 0, 7], [5], dtype);
      const onDevice = host.to('webgpu');
      assert.equal(onDevice.device, 'webgpu');
      assert.deepEqual([...(await onDevice.toHostAsync()).data], [...host.data], dtype);
      onDevice.dispose();
    }
    const mask = Tensor.fromArray([1, 0, 1], [3], 'bool').to('webgpu');
    assert.deepEqual([...(await mask.toHostAsync()).data], [1, 0, 1]);
    mask.dispose();
  });

  it('refuses a synchronous read with a typed error that says how to read', () => {
    const t = Tensor.fromArray([1, 2], [2]).to('webgpu');
    assert.throws(() => t.toHost(), /toHostAsync/);
    assert.throws(() => t.toFloat64Array(), InvalidArgumentError);
    assert.throws(() => t.data, /toHostAsync/);
    assert.throws(() => t.to('cuda'), InvalidArgumentError);
    t.dispose();
  });

  it('counts WebGPU buffers in memoryStats and frees them on dispose, call after call', async () => {
    const q = randomNormal([1, 8, 2, 16], { seed: 1 }).to('webgpu');
    const before = memoryStats();
    for (let i = 0; i < 20; i++) {
      const r = attention(q, q, q, { returnLogSumExp: true });
      r.output.dispose();
      r.logSumExp?.dispose();
    }
    const after = memoryStats();
    assert.equal(after.webgpuBuffers, before.webgpuBuffers);
    assert.equal(after.webgpuBytes, before.webgpuBytes);
    const held = attention(q, q, q).output;
    // 1·8·2·16 float32 = 1,024 bytes.
    assert.equal(memoryStats().webgpuBytes - before.webgpuBytes, 1024);
    held.dispose();
    q.dispose();
    assert.equal(memoryStats().webgpuBytes, before.webgpuBytes - 1024);
  });

  it('is what auto picks for webgpu inputs, and says so', () => {
    const q = randomNormal([1, 4, 2, 8], { seed: 2 }).to('webgpu');
    const r = attention(q, q, q);
    assert.equal(r.backend, 'webgpu');
    assert.equal(r.device, 'webgpu');
    assert.match(r.variant, /^webgpu-flash-(plain|subgroups|decode-s\d+)-float32-h8-hv8-/);
    r.output.dispose();
    q.dispose();
  });

  it('refuses float64, and a cpu backend named for webgpu inputs, with the reason', () => {
    const q = randomNormal([1, 4, 2, 8], { seed: 3, dtype: 'float64' }).to('webgpu');
    assert.throws(
      () => attention(q, q, q),
      (e: unknown) => e instanceof UnsupportedError && /float64/.test(e.message),
    );
    q.dispose();
    const f = randomNormal([1, 4, 2, 8], { seed: 3 }).to('webgpu');
    assert.throws(
      () => attention(f, f, f, { implementation: 'reference' }),
      /runs on cpu, the inputs are on webgpu/,
    );
    f.dispose();
  });

  it('checks each limit before a dispatch and names it', () => {
    const q = randomNormal([1, 4, 2, 128], { seed: 4 });
    const problem = validateAttention(q, q, q, {});
    const limits = { ...webgpuContext().info.limits };
    const cases: [Partial<typeof limits>, RegExp][] = [
      [{ maxComputeWorkgroupStorageSize: 1024 }, /maxComputeWorkgroupStorageSize is 1024/],
      [
        { maxStorageBufferBindingSize: 1000 },
        /query takes 4096 bytes, past maxStorageBufferBindingSize \(1000\)/,
      ],
      [{ maxBufferSize: 2000 }, /past maxBufferSize \(2000\)/],
      [
        { maxComputeInvocationsPerWorkgroup: 8 },
        /16 invocations per workgroup exceed maxComputeInvocationsPerWorkgroup \(8\)/,
      ],
      [{ maxComputeWorkgroupsPerDimension: 1 }, /2 heads N exceed maxComputeWorkgroupsPerDimension \(1\)/],
      [
        { maxStorageBuffersPerShaderStage: 2 },
        /storage buffers exceed maxStorageBuffersPerShaderStage \(2\)/,
      ],
    ];
    for (const [change, reason] of cases) {
      const plan = planForward(problem, { ...limits, ...change });
      assert.equal(plan.ok, false, JSON.stringify(change));
      assert.match((plan as { reason: string }).reason, reason);
    }
    assert.equal(planForward(problem, limits).ok, true);
  });

  it('refuses a buffer past maxBufferSize by name, before any allocation', () => {
    const { maxBufferSize } = webgpuContext().info.limits;
    const before = memoryStats().webgpuBuffers;
    assert.throws(
      () => createTensorBuffer(maxBufferSize + 4),
      (e: unknown) => {
        return e instanceof UnsupportedError && /maxBufferSize/.test(e.message);
      },
    );
    assert.equal(memoryStats().webgpuBuffers, before);
  });

  it('reads a paged KV cache through its block table (decode and a few new tokens, split or not)', async () => {
    for (const [T, S, lengths, causal, dtype] of [
      [1, 100, [100, 37, 1], false, 'float32'],
      [5, 100, [100, 37, 5], true, 'float32'],
      [1, 1100, [1100, 700, 9], false, 'float16'],
    ] as const) {
      const [B, N, K, H] = [3, 4, 2, 32];
      const q = randomNormal([B, T, N, H], { seed: 7, dtype });
      const k = randomNormal([B, S, K, H], { seed: 8, dtype });
      const v = randomNormal([B, S, K, H], { seed: 9, dtype });
      const kp = pagedCopy(k, 16, 1);
      const vp = pagedCopy(v, 16, 1);
      const options = {
        keyValueSeqLengths: [...lengths],
        isCausal: causal,
        causalAlignment: 'bottom_right' as const,
      };
      const [gq, gk, gv] = [q, kp.pool, vp.pool].map((t) => t.to('webgpu'));
      const r = attention(gq, gk, gv, {
        ...options,
        blockTable: kp.table,
        returnLogSumExp: true,
        implementation: 'webgpu',
      });
      assert.match(r.variant, /-paged/);
      const read = { output: await r.output.toHostAsync(), logSumExp: await r.logSumExp?.toHostAsync() };
      assertMatchesOracle(read, { q, k, v, options }, dtype, `paged T=${T} S=${S} ${r.variant}`);
      for (const t of [gq, gk, gv, r.output, r.logSumExp]) t?.dispose();
    }
  });

  it('runs packed sequences (query and key/value), split or not, as the dense call with lengths', async () => {
    for (const [qLengths, kvLengths, causal] of [
      [[5, 17, 1], [5, 17, 1], true],
      [[3, 1, 2], [600, 300, 1], false],
    ] as const) {
      const [B, N, K, H] = [3, 4, 2, 32];
      const [T, S] = [Math.max(...qLengths), Math.max(...kvLengths)];
      const q = randomNormal([B, T, N, H], { seed: 21 });
      const k = randomNormal([B, S, K, H], { seed: 22 });
      const v = randomNormal([B, S, K, H], { seed: 23 });
      const [pq, pk, pv] = [pack(q, [...qLengths]), pack(k, [...kvLengths]), pack(v, [...kvLengths])];
      const options = { isCausal: causal, causalAlignment: 'bottom_right' as const, returnLogSumExp: true };
      const want = attention(q, k, v, {
        ...options,
        querySeqLengths: [...qLengths],
        keyValueSeqLengths: [...kvLengths],
        implementation: 'reference',
      });
      const [gq, gk, gv] = [pq.tensor, pk.tensor, pv.tensor].map((t) => t.to('webgpu'));
      const r = attention(gq, gk, gv, {
        ...options,
        querySeqOffsets: pq.offsets,
        keyValueSeqOffsets: pk.offsets,
        implementation: 'webgpu',
      });
      assert.match(r.variant, S > 512 ? /-split-.*-packedq-packedkv/ : /-packedq-packedkv/);
      assert.deepEqual(r.output.shape, [pq.offsets[B], N, H]);
      const out = unpack(await r.output.toHostAsync(), pq.offsets, T);
      const lse = unpack(await r.logSumExp!.toHostAsync(), pq.offsets, T, Number.NEGATIVE_INFINITY);
      const [wantOut, wantLse] = [want.output.toFloat64Array(), want.logSumExp!.toFloat64Array()];
      for (let i = 0; i < out.length; i++)
        assert.ok(Math.abs(out[i] - wantOut[i]) < 1e-5, `${r.variant} output ${i}`);
      for (let i = 0; i < lse.length; i++) {
        assert.ok(lse[i] === wantLse[i] || Math.abs(lse[i] - wantLse[i]) < 1e-5, `${r.variant} lse ${i}`);
      }
      for (const t of [gq, gk, gv, r.output, r.logSumExp]) t?.dispose();
    }
  });

  it("runs a KVCache on 'webgpu': a prompt then decode steps equal the causal prefill", async () => {
    const [B, L, N, K, H, prompt] = [2, 24, 4, 2, 16, 9];
    const q = randomNormal([B, L, N, H], { seed: 11, dtype: 'float16' });
    const k = randomNormal([B, L, K, H], { seed: 12, dtype: 'float16' });
    const v = randomNormal([B, L, K, H], { seed: 13, dtype: 'float16' });
    const prefill = attention(q, k, v, {
      isCausal: true,
      implementation: 'reference',
    }).output.toFloat64Array();
    const cache = new KVCache({
      numBlocks: 16,
      blockSize: 4,
      numKvHeads: K,
      headDim: H,
      dtype: 'float16',
      device: 'webgpu',
    });
    const before = memoryStats().webgpuBuffers;
    const ids = [cache.addSequence(), cache.addSequence()];
    const row = N * H;
    for (let t = 0; t < L; t = t === 0 ? prompt : t + 1) {
      const n = t === 0 ? prompt : 1;
      const [kt, vt, qt] = [k, v, q].map((x) => sliceRows(x, t, n).to('webgpu'));
      cache.append(ids, kt, vt);
      const { output, variant } = cache.attention(qt, ids);
      assert.match(variant, /^webgpu-flash-.*-paged/);
      const out = await output.toFloat64ArrayAsync();
      for (let b = 0; b < B; b++)
        for (let r = 0; r < n; r++)
          for (let e = 0; e < row; e++) {
            const want = prefill[(b * L + t + r) * row + e];
            // float16 output rounding: half an ulp at |x| < 4 is 2^-9.
            assert.ok(Math.abs(out[(b * n + r) * row + e] - want) < 2e-3, `t=${t + r} b=${b}`);
          }
      for (const x of [kt, vt, qt, output]) x.dispose();
    }
    assert.equal(memoryStats().webgpuBuffers, before);
    cache.dispose();
  });

  it('keeps the Dawn instance alive: a process that drops everything and collects exits cleanly', () => {
    // dawn.node's create() result, collected while its device lives, segfaults or aborts the process.
    const runtime = new URL('../../../../src/backends/webgpu/runtime.ts', import.meta.url).href;
    const code =
      `const m = await import(${JSON.stringify(runtime)}); await m.initWebgpu();` +
      'for (let i = 0; i < 5; i++) { globalThis.gc(); await new Promise((r) => setTimeout(r, 20)); }' +
      "process.stdout.write('done');";
    const run = spawnSync(
      process.execPath,
      ['--expose-gc', '--import', 'tsx', '--input-type=module', '-e', code],
      {
        encoding: 'utf8',
        env: process.env,
        timeout: 60_000,
      },
    );
    assert.equal(run.signal, null, run.stderr);
    assert.equal(run.status, 0, run.stderr);
    assert.equal(run.stdout, 'done');
  });

  it('is timed by bench (--impl webgpu): a row with its variant and its error against the oracle, and the backward', async () => {
    const c = {
      impl: 'webgpu' as const,
      dtype: 'float16' as const,
      B: 1,
      T: 64,
      S: 64,
      N: 2,
      K: 2,
      H: 32,
      causal: true,
    };
    const row = await measureWebgpuCase(c, { repeats: 3, minRepeats: 3, warmup: 1, budgetMs: 1000 });
    assert.equal(row.status, 'ok', row.reason);
    assert.match(row.variant ?? '', /^webgpu-flash-.*-causal/);
    assert.equal(row.timing?.method, 'performance-now');
    assert.ok(
      row.maxError !== null && row.maxError !== undefined && row.maxError < 4e-3,
      String(row.maxError),
    );
    const backward = await measureWebgpuCase(c, { pass: 'backward', repeats: 3, minRepeats: 3, warmup: 1 });
    assert.equal(backward.status, 'ok', backward.reason);
    assert.match(backward.variant ?? '', /^webgpu-backward-rows-float16-h32-hv32$/);
  });

  it('turns device loss into DeviceError, then recovers on the next device', async () => {
    const q = randomNormal([1, 8, 2, 16], { seed: 5 });
    const old = q.to('webgpu');
    const expected = await attention(old, old, old).output.toFloat64ArrayAsync();
    const { generation, device } = webgpuContext();
    device.destroy();
    // Dawn reports the loss asynchronously; from then on calls throw DeviceError until the new device is ready.
    for (let i = 0; i < 200 && !replaced(generation); i++) await new Promise((r) => setTimeout(r, 10));
    assert.ok(replaced(generation), 'the device loss was reported');
    await initWebgpu();
    assert.ok(webgpuContext().generation > generation);
    assert.throws(() => attention(old, old, old), DeviceError);
    const fresh = q.to('webgpu');
    const again = await attention(fresh, fresh, fresh).output.toFloat64ArrayAsync();
    assert.deepEqual([...again], [...expected]);
    fresh.dispose();
    old.dispose();
  });
});

/** Whether the device of `generation` is gone: lost (DeviceError now) or replaced already. */
function replaced(generation: number): boolean {
  try {
    return webgpuContext().generation !== generation;
  } catch (error) {
    return error instanceof DeviceError;
  }
}
