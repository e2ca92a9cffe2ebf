/**
 * The cuDNN plan cache on the GPU: a repeated call builds nothing and takes no new device memory; a
 * plan on disk is loaded by a cleared memory cache and by a second process in ≤ 20 ms (up to 100 ms,
 * a twentieth of the build's time, when other processes load the machine) and gives bit-identical
 * outputs; ATTNLAB_CUDNN_PLAN_CACHE=0 writes nothing.
 *
 * Run as `ATTNLAB_CUDNN_CHILD=1 node --import tsx test/gpu/forward/cudnn-plan-cache.test.ts` it is that second
 * process: it runs one case and prints where its plan came from.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { validateAttention } from '../../../src/api/validate.js';
import { runCudnnAttention } from '../../../src/backends/cuda/cudnn/backend.js';
import { clearMemoryPlanCache, planCacheStats } from '../../../src/backends/cuda/cudnn/plan-cache.js';
import { cudaAvailable, synchronize } from '../../../src/backends/cuda/runtime/context.js';
import { memoryStats } from '../../../src/backends/cuda/runtime/memory.js';
import { type AttentionCase, buildInputs } from '../../../src/check/cases.js';
import { reloadConfig } from '../../../src/config.js';
import type { FloatDType } from '../../../src/tensor/dtype.js';
import type { Tensor } from '../../../src/tensor/tensor.js';

const DISK_CASE: AttentionCase = {
  name: 'disk cache: T=S=256 causal GQA H=128 + lse',
  shape: { B: 2, T: 256, S: 256, N: 4, K: 2, H: 128 },
  options: { isCausal: true, returnLogSumExp: true },
};

/** The same case's output bits, weighted and summed, so two processes can compare them. */
function checksum(t: Tensor): string {
  const bits = t.toHost().data as Uint16Array;
  let sum = 0n;
  for (let i = 0; i < bits.length; i++) sum += BigInt(bits[i]) * BigInt((i % 9973) + 1);
  return sum.toString();
}

function deviceProblem(c: AttentionCase, dtype: FloatDType, seed: number) {
  const { q, k, v, options } = buildInputs(c, dtype, seed);
  return validateAttention(q.to('cuda'), k.to('cuda'), v.to('cuda'), options);
}

if (process.env.ATTNLAB_CUDNN_CHILD) {
  const r = runCudnnAttention(deviceProblem(DISK_CASE, 'bfloat16', 5));
  console.log(
    JSON.stringify({ planSource: r.planSource, planSetupMs: r.planSetupMs, checksum: checksum(r.output) }),
  );
  process.exit(0);
}

const cuda = cudaAvailable();
const skip = cuda.ok ? false : `no CUDA device: ${cuda.reason}`;
const seed = Number(process.env.ATTNLAB_TEST_SEED ?? Date.now() % 1_000_000_000);
const cacheDir = mkdtempSync(join(tmpdir(), 'attnlab-cudnn-'));
process.env.ATTNLAB_CACHE_DIR = cacheDir;
reloadConfig();
const SMALL: AttentionCase = {
  name: 'T=S=384 causal',
  shape: { B: 1, T: 384, S: 384, N: 2, K: 1, H: 128 },
  options: { isCausal: true },
};

describe('cudnn plan cache', { skip }, () => {
  it('a repeated call builds nothing and takes no new device memory from the driver', () => {
    const p = deviceProblem(SMALL, 'bfloat16', seed);
    runCudnnAttention(p).output.dispose();
    synchronize();
    const [stats, allocations] = [planCacheStats(), memoryStats().driverAllocations];
    for (let i = 0; i < 10; i++) runCudnnAttention(p).output.dispose();
    synchronize();
    const now = planCacheStats();
    assert.equal(now.builds, stats.builds);
    assert.equal(now.diskHits, stats.diskHits);
    assert.equal(now.memoryHits, stats.memoryHits + 10);
    assert.equal(memoryStats().driverAllocations, allocations);
  });

  it('keeps plans on disk: a cleared memory cache and a second process load them in ≤ 20 ms', () => {
    const first = runCudnnAttention(deviceProblem(DISK_CASE, 'bfloat16', 5));
    assert.equal(first.planSource, 'built');
    const files = readdirSync(join(cacheDir, 'cudnn-plans')).filter((f) => f.endsWith('.json'));
    assert.ok(files.length > 0, 'no plan file written');
    console.log(
      `# plan built in ${first.planSetupMs.toFixed(1)} ms; ${files.length} plan files in ${cacheDir}`,
    );
    const expected = checksum(first.output);
    clearMemoryPlanCache();
    const again = runCudnnAttention(deviceProblem(DISK_CASE, 'bfloat16', 5));
    assert.equal(again.planSource, 'disk');
    assert.equal(checksum(again.output), expected);
    console.log(
      `# same process, memory cache cleared: plan loaded from disk in ${again.planSetupMs.toFixed(2)} ms`,
    );
    // 20 ms on a quiet machine; beside 20 other test processes (scripts/gpu-verify.sh) a load took 34 ms
    // while the build took 2.9 s. Under load the bound grows with the build timed under the same load
    // (a twentieth of it), to at most 100 ms: a load that slow is a regression whatever the load.
    const bound = Math.min(100, Math.max(20, first.planSetupMs / 20));
    assert.ok(
      again.planSetupMs <= bound,
      `loading took ${again.planSetupMs} ms (build ${first.planSetupMs} ms)`,
    );
    const child = spawnSync(process.execPath, ['--import', 'tsx', new URL(import.meta.url).pathname], {
      env: { ...process.env, ATTNLAB_CUDNN_CHILD: '1' },
      encoding: 'utf8',
    });
    assert.equal(child.status, 0, child.stderr);
    const answer = JSON.parse(child.stdout.trim().split('\n').pop() ?? '{}');
    console.log(
      `# second process: plan from ${answer.planSource} in ${Number(answer.planSetupMs).toFixed(2)} ms`,
    );
    assert.equal(answer.planSource, 'disk');
    assert.ok(
      answer.planSetupMs <= bound,
      `second process took ${answer.planSetupMs} ms (bound ${bound} ms)`,
    );
    assert.equal(answer.checksum, expected);
  });

  it('writes nothing to disk when ATTNLAB_CUDNN_PLAN_CACHE=0', () => {
    const before = planCacheStats().diskWrites;
    process.env.ATTNLAB_CUDNN_PLAN_CACHE = '0';
    reloadConfig();
    try {
      const c: AttentionCase = { name: 'no disk', shape: { B: 1, T: 96, S: 96, N: 2, K: 2, H: 32 } };
      runCudnnAttention(deviceProblem(c, 'float16', seed)).output.dispose();
    } finally {
      delete process.env.ATTNLAB_CUDNN_PLAN_CACHE;
      reloadConfig();
    }
    assert.equal(planCacheStats().diskWrites, before);
    assert.ok(existsSync(cacheDir));
  });
});
