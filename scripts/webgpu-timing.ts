/**
 * Times the webgpu backend on the shapes issue #44 names, beside attnlab's CUDA flash on the same
 * GPU (where CUDA exists) and the copy bandwidth Dawn reaches, and prints one JSON line per row.
 *
 * In this order (the cheapest first, so a run cut by a time limit keeps them):
 *   copy     copyBufferToBuffer of 1 GiB (read + write counted)
 *   decode   B=8 T=1 S=32768 N=32 K=8 H=128 float16, every sequence full: a dense cache, and the
 *            same tokens as a paged cache of 256-token blocks
 *   forward  B=4 T=S=4096 N=16 K=16 H=128 float16, causal and not (the sgmat kernel where the
 *            device has it, beside the tiled kernel; the row kernel is not timed: 2.7 TFLOP/s)
 *   backward B=1 T=S=2048 N=8 H=128 float16 (the webgpu backward's dq and dkdv kernels)
 *
 * WebGPU time: wall clock from submit to onSubmittedWorkDone, median of `--reps` after a warm-up
 * (timestamp queries are not used: SwiftShader and some drivers quantise them). Inputs are
 * bench's seeded blocks tiled along the sequence (seededInput): drawing 268M normals for the
 * decode cache would take V8 ~90 s. Run:
 *   node --import tsx scripts/webgpu-timing.ts [--reps 5] [--small] [--only forward] [--toggles a,b]
 * `--small` shrinks every size 4× per dimension, for a software adapter.
 */
import { attention } from '../src/api/attention.js';
import { attentionVjp } from '../src/api/backward.js';
import { validateAttention } from '../src/api/validate.js';
import { attentionBackwardFlops } from '../src/backends/backward-problem.js';
import { cudaAvailable, synchronize } from '../src/backends/cuda/runtime/context.js';
import { problemFlops } from '../src/backends/problem.js';
import { type ForwardOverrides, runForward } from '../src/backends/webgpu/forward.js';
import { USAGE } from '../src/backends/webgpu/memory.js';
import { initWebgpu, takeUncapturedErrors, webgpuContext } from '../src/backends/webgpu/runtime.js';
import { seededInput } from '../src/bench/measure.js';
import { config } from '../src/config.js';
import type { Tensor } from '../src/tensor/tensor.js';

const args = process.argv.slice(2);
const reps = Number(args[args.indexOf('--reps') + 1] || 5);
const small = args.includes('--small');
const shrink = (x: number) => (small ? Math.max(1, Math.floor(x / 4)) : x);

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
}

async function timeWebgpu(run: () => Tensor[]): Promise<number> {
  const { device } = webgpuContext();
  for (const t of run()) t.dispose();
  await device.queue.onSubmittedWorkDone();
  const times: number[] = [];
  for (let i = 0; i < reps; i++) {
    const start = performance.now();
    const outs = run();
    await device.queue.onSubmittedWorkDone();
    times.push(performance.now() - start);
    for (const t of outs) t.dispose();
  }
  // A pipeline that failed to build dispatches nothing, fast: such a time is an error, not a row.
  const errors = takeUncapturedErrors();
  if (errors.length > 0) throw new Error(errors.join('; '));
  return median(times);
}

/** The largest |a − b| over two outputs of one problem (NaN where either is NaN). */
async function maxDiff(a: Tensor, b: Tensor): Promise<number> {
  const [x, y] = [await a.toFloat64ArrayAsync(), await b.toFloat64ArrayAsync()];
  let worst = 0;
  for (let i = 0; i < x.length; i++) {
    const d = Math.abs(x[i] - y[i]);
    if (!(d <= worst)) worst = d;
  }
  return worst;
}

function timeCuda(run: () => Tensor[]): number {
  for (const t of run()) t.dispose();
  synchronize();
  const times: number[] = [];
  for (let i = 0; i < reps; i++) {
    const start = performance.now();
    const outs = run();
    synchronize();
    times.push(performance.now() - start);
    for (const t of outs) t.dispose();
  }
  return median(times);
}

function row(fields: Record<string, unknown>): void {
  process.stdout.write(`${JSON.stringify(fields)}\n`);
}

// --toggles a,b: more Dawn toggles (e.g. use_vulkan_memory_model), with the experimental ones;
// --only forward (or copy, decode, backward): that part alone.
const only = args.includes('--only') ? args[args.indexOf('--only') + 1] : null;
const want = (part: string) => only === null || only === part;
const toggles = args.includes('--toggles') ? args[args.indexOf('--toggles') + 1].split(',') : [];
const info = await initWebgpu({ experimental: config().webgpuExperimental, dawnToggles: toggles });
row({
  adapter: [info.vendor, info.architecture, info.description].filter(Boolean).join(' '),
  features: info.features,
  subgroupMatrix: info.subgroupMatrix,
  subgroupMatrixRejected: info.subgroupMatrixRejected,
  limits: info.limits,
});
const cuda = cudaAvailable().ok;

// copy bandwidth
if (want('copy')) {
  const { device, info: i } = webgpuContext();
  const size = Math.min(small ? 64 << 20 : 1 << 30, i.limits.maxBufferSize);
  const usage = USAGE.STORAGE | USAGE.COPY_SRC | USAGE.COPY_DST;
  const [a, b] = [0, 1].map(() => device.createBuffer({ size, usage }));
  const times: number[] = [];
  for (let r = 0; r <= reps; r++) {
    const start = performance.now();
    const encoder = device.createCommandEncoder();
    encoder.copyBufferToBuffer(a, 0, b, 0, size);
    device.queue.submit([encoder.finish()]);
    await device.queue.onSubmittedWorkDone();
    if (r > 0) times.push(performance.now() - start);
  }
  const ms = median(times);
  row({ op: 'copy', bytes: size, ms, gbs: (2 * size) / ms / 1e6 });
  a.destroy();
  b.destroy();
}

// decode
if (want('decode')) {
  const [B, S, N, K, H] = [shrink(8), shrink(32768), shrink(32), shrink(8), 128];
  const q = seededInput([B, 1, N, H], 4, 'float16');
  const kv = [5, 6].map((seed) => seededInput([B, S, K, H], seed, 'float16'));
  const bytes = 2 * B * S * K * H * 2 + 2 * B * N * H * 2;
  const shape = { op: 'decode', B, T: 1, S, N, K, H, dtype: 'float16' };
  const [dq, dk, dv] = [q, ...kv].map((t) => t.to('webgpu'));
  try {
    let variant = '';
    const ms = await timeWebgpu(() => {
      const r = attention(dq, dk, dv, { implementation: 'webgpu' });
      variant = r.variant;
      return [r.output];
    });
    row({ ...shape, impl: 'webgpu', variant, ms, gbs: bytes / ms / 1e6 });
  } catch (error) {
    row({ ...shape, impl: 'webgpu', error: String(error) });
  }
  // The decode kernel's choices beside the plan's (8 invocations a 256-byte key row, 32 key chunks
  // at this shape): 16 invocations a row (each reads 16 bytes of K and of V a key, 4 shuffle steps
  // a score instead of 3) with 32 or 16 chunks, 16 or 64 chunks, and two keys a pass (their score
  // chains interleaved, two keys' loads in flight); each output against the plan's.
  const decodeChoices: [string, ForwardOverrides][] = [
    ['webgpu-decode-lanes16', { decodeLanes: 16 }],
    ['webgpu-decode-lanes16-splits16', { decodeLanes: 16, splits: 16 }],
    ['webgpu-decode-splits16', { splits: 16 }],
    ['webgpu-decode-splits64', { splits: 64 }],
    ['webgpu-decode-pairs', { decodePairs: true }],
  ];
  for (const [impl, overrides] of decodeChoices) {
    try {
      const problem = validateAttention(dq, dk, dv, { implementation: 'webgpu' });
      let variant = '';
      const ms = await timeWebgpu(() => {
        const r = runForward(problem, overrides);
        variant = r.variant;
        return [r.output];
      });
      const mine = runForward(problem, overrides).output;
      const plan = attention(dq, dk, dv, { implementation: 'webgpu' }).output;
      const vsPlan = await maxDiff(mine, plan);
      mine.dispose();
      plan.dispose();
      row({ ...shape, impl, variant, ms, gbs: bytes / ms / 1e6, vsPlan });
    } catch (error) {
      row({ ...shape, impl, error: String(error) });
    }
  }
  // The row kernel on the same step (split-KV), the baseline of the decode kernel.
  try {
    const problem = validateAttention(dq, dk, dv, { implementation: 'webgpu' });
    let variant = '';
    const ms = await timeWebgpu(() => {
      const r = runForward(problem, { decode: false });
      variant = r.variant;
      return [r.output];
    });
    row({ ...shape, impl: 'webgpu-rows', variant, ms, gbs: bytes / ms / 1e6 });
  } catch (error) {
    row({ ...shape, impl: 'webgpu-rows', error: String(error) });
  }
  // The same tokens as a paged pool: (B·S/256, 256, K, H) is the dense cache's memory as it is,
  // with block b·M + m holding sequence b's block m.
  const blockSize = 256;
  const M = S / blockSize;
  const pool = [dk, dv].map((t) => t.reshape([B * M, blockSize, K, H]));
  const blockTable = Array.from({ length: B }, (_, b) => Array.from({ length: M }, (_, m) => b * M + m));
  try {
    let variant = '';
    const ms = await timeWebgpu(() => {
      const r = attention(dq, pool[0], pool[1], {
        implementation: 'webgpu',
        blockTable,
        keyValueSeqLengths: new Array(B).fill(S),
      });
      variant = r.variant;
      return [r.output];
    });
    row({ ...shape, layout: 'paged', blockSize, impl: 'webgpu', variant, ms, gbs: bytes / ms / 1e6 });
  } catch (error) {
    row({ ...shape, layout: 'paged', impl: 'webgpu', error: String(error) });
  }
  for (const t of [dq, dk, dv]) t.dispose();
  if (cuda) {
    const [cq, ck, cv] = [q, ...kv].map((t) => t.to('cuda'));
    const ms = timeCuda(() => [attention(cq, ck, cv, { implementation: 'flash' }).output]);
    row({ ...shape, impl: 'cuda-flash', ms, gbs: bytes / ms / 1e6 });
    for (const t of [cq, ck, cv]) t.dispose();
  }
}

// forward
if (want('forward')) {
  const [B, T, N, H] = [shrink(4), shrink(4096), shrink(16), 128];
  const host = [1, 2, 3].map((seed) => seededInput([B, T, N, H], seed, 'float16'));
  for (const causal of [false, true]) {
    const flops = problemFlops({ B, T, S: T, N, H, causal });
    const shape = { op: 'forward', B, T, S: T, N, K: N, H, dtype: 'float16', causal };
    const [q, k, v] = host.map((t) => t.to('webgpu'));
    let variant = '';
    try {
      const ms = await timeWebgpu(() => {
        const r = attention(q, k, v, { isCausal: causal, implementation: 'webgpu' });
        variant = r.variant;
        return [r.output];
      });
      row({ ...shape, impl: 'webgpu', variant, ms, tflops: flops / ms / 1e9 });
    } catch (error) {
      row({ ...shape, impl: 'webgpu', error: String(error) });
    }
    // The tiled kernel where the subgroup-matrix one runs: what adapters without them get; and the
    // subgroup-matrix kernel with 32-key tiles beside its 64.
    if (variant.includes('sgmat')) {
      try {
        const problem = validateAttention(q, k, v, { isCausal: causal, implementation: 'webgpu' });
        let v32 = '';
        const ms = await timeWebgpu(() => {
          const r = runForward(problem, { sgmatKeys: 32 });
          v32 = r.variant;
          return [r.output];
        });
        row({ ...shape, impl: 'webgpu-sgmat-c32', variant: v32, ms, tflops: flops / ms / 1e9 });
      } catch (error) {
        row({ ...shape, impl: 'webgpu-sgmat-c32', error: String(error) });
      }
      // 8 subgroups: 128 query rows a workgroup (32-key tiles fit 48 KiB), half the K and V
      // staging a product.
      try {
        const problem = validateAttention(q, k, v, { isCausal: causal, implementation: 'webgpu' });
        let v8 = '';
        const ms = await timeWebgpu(() => {
          const r = runForward(problem, { sgmatSubgroups: 8 });
          v8 = r.variant;
          return [r.output];
        });
        row({ ...shape, impl: 'webgpu-sgmat-r128', variant: v8, ms, tflops: flops / ms / 1e9 });
      } catch (error) {
        row({ ...shape, impl: 'webgpu-sgmat-r128', error: String(error) });
      }
      try {
        const problem = validateAttention(q, k, v, { isCausal: causal, implementation: 'webgpu' });
        let tiledVariant = '';
        const ms = await timeWebgpu(() => {
          const r = runForward(problem, { sgmat: false });
          tiledVariant = r.variant;
          return [r.output];
        });
        // The two kernels' outputs side by side: the timed sgmat output is a real result.
        const fast = attention(q, k, v, { isCausal: causal, implementation: 'webgpu' }).output;
        const slow = runForward(problem, { sgmat: false }).output;
        const sgmatVsTiled = await maxDiff(fast, slow);
        fast.dispose();
        slow.dispose();
        row({
          ...shape,
          impl: 'webgpu-tiled',
          variant: tiledVariant,
          ms,
          tflops: flops / ms / 1e9,
          sgmatVsTiled,
        });
      } catch (error) {
        row({ ...shape, impl: 'webgpu-tiled', error: String(error) });
      }
    }
    for (const t of [q, k, v]) t.dispose();
    if (cuda) {
      const [cq, ck, cv] = host.map((t) => t.to('cuda'));
      const ms = timeCuda(() => [
        attention(cq, ck, cv, { isCausal: causal, implementation: 'flash' }).output,
      ]);
      row({ ...shape, impl: 'cuda-flash', ms, tflops: flops / ms / 1e9 });
      for (const t of [cq, ck, cv]) t.dispose();
    }
  }
}

// backward: the three kernels of the webgpu backward (dq, dkdv), against CUDA flash's backward
if (want('backward')) {
  const [B, T, N, H] = [1, shrink(2048), shrink(8), 128];
  const host = [1, 2, 3, 4].map((seed) => seededInput([B, T, N, H], seed, 'float16'));
  const flops = attentionBackwardFlops({ B, T, S: T, N, H, causal: false });
  const shape = { op: 'backward', B, T, S: T, N, K: N, H, dtype: 'float16', causal: false };
  const [q, k, v, dO] = host.map((t) => t.to('webgpu'));
  try {
    const f = attentionVjp(q, k, v, { implementation: 'webgpu' });
    let variant = '';
    const ms = await timeWebgpu(() => {
      const g = f.backward(dO);
      variant = g.variant;
      return [g.dQuery, g.dKey, g.dValue];
    });
    row({ ...shape, impl: 'webgpu', variant, ms, tflops: flops / ms / 1e9 });
    for (const t of [f.output, f.logSumExp]) t.dispose();
  } catch (error) {
    row({ ...shape, impl: 'webgpu', error: String(error) });
  }
  for (const t of [q, k, v, dO]) t.dispose();
  if (cuda) {
    const [cq, ck, cv, cdO] = host.map((t) => t.to('cuda'));
    const f = attentionVjp(cq, ck, cv, { implementation: 'flash' });
    const ms = timeCuda(() => {
      const g = f.backward(cdO);
      return [g.dQuery, g.dKey, g.dValue];
    });
    row({ ...shape, impl: 'cuda-flash', ms, tflops: flops / ms / 1e9 });
    for (const t of [cq, ck, cv, cdO, f.output, f.logSumExp]) t.dispose();
  }
}
