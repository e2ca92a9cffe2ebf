/**
 * jax-js's nn.dotProductAttention on WebGPU in Node, beside attnlab's webgpu forward on the same
 * adapter, inputs and shape: issue #44's peer. jax-js (@jax-js/jax) looks for navigator.gpu and
 * WebGPU's globals (GPUBufferUsage…), which the `webgpu` package provides (`create`, `globals`);
 * its einsum parser calls ES2025 iterator helpers (`matchAll(…).map`), which Node < 22 lacks:
 * core-js's iterator polyfill supplies them. Neither package is a dependency of attnlab: `--modules
 * <dir>` names a node_modules folder that holds @jax-js/jax and core-js (npm install
 * @jax-js/jax@0.1.25 core-js@3 there), else they are looked up beside the repository's own.
 *
 * jax-js's attention is unfused (an einsum, a softmax, an einsum: a B·N·T·S score array), so at
 * the issue's shape (B=4 T=S=4096 N=16 H=128, 2 GiB of f16 scores) it may exceed the device's
 * buffer limits: each shape is tried from the issue's down (B, then N, halved) until jax-js runs,
 * and its output is compared with attnlab's on the same inputs before it is timed. One JSON line
 * a row. Time: wall clock of a call through blockUntilReady (jax-js) / onSubmittedWorkDone
 * (attnlab), median of `--reps` after a warm-up. With ATTNLAB_WEBGPU_EXPERIMENTAL=1 both get the
 * device with shader-f16 on NVIDIA (Dawn's vulkan_enable_f16_on_nvidia).
 * Run: node --import tsx benchmarks/harnesses/webgpu-peer-jaxjs.ts [--modules dir] [--reps 5] [--small]
 *   [--dtype float32]
 */
import { existsSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { attention } from '../../src/api/attention.js';
import { problemFlops } from '../../src/backends/problem.js';
import { EXPERIMENTAL_DAWN_TOGGLES, initWebgpu, webgpuContext } from '../../src/backends/webgpu/runtime.js';
import { seededInput } from '../../src/bench/measure.js';
import { config } from '../../src/config.js';

const args = process.argv.slice(2);
const option = (name: string) => (args.includes(name) ? args[args.indexOf(name) + 1] : undefined);
const reps = Number(option('--reps') ?? 5);
const small = args.includes('--small');
// float32 where the adapter lacks shader-f16 (SwiftShader): jax-js refuses float16 there.
const dtype = option('--dtype') === 'float32' ? 'float32' : 'float16';
const modules = resolve(option('--modules') ?? 'node_modules');
const row = (fields: Record<string, unknown>) => process.stdout.write(`${JSON.stringify(fields)}\n`);

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
}

const jaxEntry = join(modules, '@jax-js/jax/dist/index.js');
if (!existsSync(jaxEntry)) {
  row({
    skipped: `@jax-js/jax is not installed under ${modules} (npm install @jax-js/jax@0.1.25 core-js@3)`,
  });
  process.exit(0);
}
const iteratorProto = Object.getPrototypeOf(Object.getPrototypeOf([][Symbol.iterator]())) as {
  map?: unknown;
};
if (typeof iteratorProto.map !== 'function') {
  const polyfill = join(modules, 'core-js/actual/iterator/index.js');
  if (!existsSync(polyfill)) {
    row({
      skipped: `Node ${process.version} lacks iterator helpers and core-js is not installed under ${modules}`,
    });
    process.exit(0);
  }
  await import(pathToFileURL(polyfill).href);
}
const dawn = (await import('webgpu')) as unknown as {
  create(o: string[]): GPU;
  globals: Record<string, unknown>;
};
const experimental = config().webgpuExperimental;
const gpu = dawn.create(experimental ? [EXPERIMENTAL_DAWN_TOGGLES] : []);
Object.assign(globalThis, dawn.globals);
Object.defineProperty(globalThis, 'navigator', {
  value: { gpu, userAgent: `Node.js ${process.version}` },
  configurable: true,
});
const info = await initWebgpu({ gpu });
// biome-ignore lint/suspicious/noExplicitAny: jax-js is loaded from a path, without its types.
const jax: any = await import(pathToFileURL(jaxEntry).href);
const devices: string[] = await jax.init('webgpu');
row({
  adapter: info.description || info.vendor,
  experimental,
  jaxjs: JSON.parse((await import('node:fs')).readFileSync(join(modules, '@jax-js/jax/package.json'), 'utf8'))
    .version,
  jaxDevices: devices,
  features: info.features,
});
if (!devices.includes('webgpu')) {
  row({ skipped: 'jax-js found no WebGPU device' });
  process.exit(0);
}
jax.defaultDevice('webgpu');
const np = jax.numpy;
const shrink = (x: number) => (small ? Math.max(1, x / 8) : x);

for (const causal of [false, true]) {
  for (let [B, N] = [shrink(4), shrink(16)]; B >= 1 && N >= 1; B > 1 ? (B /= 2) : (N /= 2)) {
    const [T, H] = [shrink(4096), 128];
    const shape = { op: 'forward', B, T, S: T, N, K: N, H, dtype, causal };
    const flops = problemFlops({ B, T, S: T, N, H, causal });
    const host = [1, 2, 3].map((seed) => seededInput([B, T, N, H], seed, dtype));
    const values = host.map((t) => Float32Array.from(t.toFloat64Array()));
    // jax-js: [B, T, N, H] arrays of float16 on its WebGPU device.
    const [q, k, v] = values.map((x) =>
      dtype === 'float16'
        ? np.array(x, { shape: [B, T, N, H] }).astype(np.float16)
        : np.array(x, { shape: [B, T, N, H] }),
    );
    const call = () => jax.nn.dotProductAttention(q.ref, k.ref, v.ref, { isCausal: causal });
    let jaxOut: Float32Array;
    try {
      const o = call();
      await o.blockUntilReady();
      jaxOut = Float32Array.from(await o.data());
    } catch (error) {
      row({ ...shape, impl: 'jax-js', error: String(error).split('\n')[0] });
      for (const x of [q, k, v]) x.dispose();
      continue;
    }
    // attnlab's webgpu forward on the same inputs: the reference for jax-js's output, and its time.
    const [aq, ak, av] = host.map((t) => t.to('webgpu'));
    const first = attention(aq, ak, av, { isCausal: causal, implementation: 'webgpu' });
    const ours = await first.output.toFloat64ArrayAsync();
    first.output.dispose();
    let vsAttnlab = 0;
    for (let i = 0; i < ours.length; i++) {
      const d = Math.abs(jaxOut[i] - ours[i]);
      if (!(d <= vsAttnlab)) vsAttnlab = d;
    }
    const jaxTimes: number[] = [];
    for (let r = 0; r < reps; r++) {
      const start = performance.now();
      const o = call();
      await o.blockUntilReady();
      jaxTimes.push(performance.now() - start);
      o.dispose();
    }
    const { device } = webgpuContext();
    const ourTimes: number[] = [];
    for (let r = 0; r <= reps; r++) {
      const start = performance.now();
      const out = attention(aq, ak, av, { isCausal: causal, implementation: 'webgpu' });
      await device.queue.onSubmittedWorkDone();
      if (r > 0) ourTimes.push(performance.now() - start);
      out.output.dispose();
    }
    const jaxMs = median(jaxTimes);
    const ourMs = median(ourTimes);
    row({ ...shape, impl: 'jax-js', ms: jaxMs, tflops: flops / jaxMs / 1e9, vsAttnlab });
    row({
      ...shape,
      impl: 'webgpu',
      variant: first.variant,
      ms: ourMs,
      tflops: flops / ourMs / 1e9,
      speedup: jaxMs / ourMs,
    });
    for (const x of [q, k, v]) x.dispose();
    for (const t of [aq, ak, av]) t.dispose();
    break;
  }
}
process.exit(0);
