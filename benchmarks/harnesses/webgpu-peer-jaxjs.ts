/**
 * jax-js's nn.dotProductAttention on WebGPU in Node, beside attnlab's webgpu forward on the same
 * adapter, inputs and shape: issue #44's peer. jax-js (@jax-js/jax) looks for navigator.gpu and
 * WebGPU's globals (GPUBufferUsage…), which the `webgpu` package provides (`create`, `globals`);
 * its einsum parser calls ES2025 iterator helpers (`matchAll(…).map`), which Node < 22 lacks:
 * installIteratorHelpers() below adds the ones jax-js calls where they are missing (core-js has them
 * all, in 16 MB). jax-js is not a dependency of attnlab: `--modules <dir>` names a node_modules
 * folder that holds @jax-js/jax (scripts/webgpu-peers.sh prepares one), else it is looked up beside
 * the repository's own.
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
import { problemFlops } from '../../src/backends/problem.js';
import { EXPERIMENTAL_DAWN_TOGGLES, initWebgpu } from '../../src/backends/webgpu/runtime.js';
import { seededInput } from '../../src/bench/measure.js';
import { config } from '../../src/config.js';
import { attnlabBeside, maxDifference, median } from './webgpu-peer-attnlab.js';

const args = process.argv.slice(2);
const option = (name: string) => (args.includes(name) ? args[args.indexOf(name) + 1] : undefined);
const reps = Number(option('--reps') ?? 5);
const small = args.includes('--small');
// float32 where the adapter lacks shader-f16 (SwiftShader): jax-js refuses float16 there.
const dtype = option('--dtype') === 'float32' ? 'float32' : 'float16';
const modules = resolve(option('--modules') ?? 'node_modules');
const row = (fields: Record<string, unknown>) => process.stdout.write(`${JSON.stringify(fields)}\n`);

const jaxEntry = join(modules, '@jax-js/jax/dist/index.js');
if (!existsSync(jaxEntry)) {
  row({
    skipped: `@jax-js/jax is not installed under ${modules} (npm install @jax-js/jax@0.1.25 core-js@3)`,
  });
  process.exit(0);
}
installIteratorHelpers();
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
    const ours = await attnlabBeside(host, causal, reps);
    const jaxTimes: number[] = [];
    for (let r = 0; r < reps; r++) {
      const start = performance.now();
      const o = call();
      await o.blockUntilReady();
      jaxTimes.push(performance.now() - start);
      o.dispose();
    }
    const jaxMs = median(jaxTimes);
    row({
      ...shape,
      impl: 'jax-js',
      ms: jaxMs,
      tflops: flops / jaxMs / 1e9,
      vsAttnlab: maxDifference(jaxOut, ours.output),
    });
    row({
      ...shape,
      impl: 'webgpu',
      variant: ours.variant,
      ms: ours.ms,
      tflops: flops / ours.ms / 1e9,
      speedup: jaxMs / ours.ms,
    });
    for (const x of [q, k, v]) x.dispose();
    break;
  }
}
process.exit(0);

/**
 * ES2025's iterator helpers on %IteratorPrototype% where the runtime lacks them (Node < 22): lazy
 * map, filter, take, drop and flatMap, and reduce, toArray, forEach, some, every, find, as the
 * proposal defines them for the cases jax-js uses (a callback with the value and its index).
 */
function installIteratorHelpers(): void {
  const proto = Object.getPrototypeOf(Object.getPrototypeOf([][Symbol.iterator]())) as Record<
    string,
    unknown
  >;
  if (typeof proto.map === 'function') return;
  type It = Iterator<unknown> & Iterable<unknown>;
  const define = (name: string, fn: (this: It, ...a: never[]) => unknown) =>
    Object.defineProperty(proto, name, { value: fn, writable: true, configurable: true });
  function* mapped(it: It, f: (x: unknown, i: number) => unknown) {
    let i = 0;
    for (const x of { [Symbol.iterator]: () => it }) yield f(x, i++);
  }
  function* filtered(it: It, f: (x: unknown, i: number) => unknown) {
    let i = 0;
    for (const x of { [Symbol.iterator]: () => it }) if (f(x, i++)) yield x;
  }
  function* taken(it: It, n: number) {
    if (n <= 0) return;
    let i = 0;
    for (const x of { [Symbol.iterator]: () => it }) {
      yield x;
      if (++i >= n) return;
    }
  }
  function* dropped(it: It, n: number) {
    let i = 0;
    for (const x of { [Symbol.iterator]: () => it }) if (i++ >= n) yield x;
  }
  function* flat(it: It, f: (x: unknown, i: number) => Iterable<unknown>) {
    let i = 0;
    for (const x of { [Symbol.iterator]: () => it }) yield* f(x, i++);
  }
  const all = (it: It) => Array.from({ [Symbol.iterator]: () => it });
  define('map', function (f: never) {
    return mapped(this, f);
  });
  define('filter', function (f: never) {
    return filtered(this, f);
  });
  define('take', function (n: never) {
    return taken(this, n);
  });
  define('drop', function (n: never) {
    return dropped(this, n);
  });
  define('flatMap', function (f: never) {
    return flat(this, f);
  });
  define('toArray', function () {
    return all(this);
  });
  define('forEach', function (f: (x: unknown, i: number) => void) {
    for (const [i, x] of all(this).entries()) f(x, i);
  });
  define('some', function (f: (x: unknown, i: number) => boolean) {
    return all(this).some((x, i) => f(x, i));
  });
  define('every', function (f: (x: unknown, i: number) => boolean) {
    return all(this).every((x, i) => f(x, i));
  });
  define('find', function (f: (x: unknown, i: number) => boolean) {
    return all(this).find((x, i) => f(x, i));
  });
  define('reduce', function (f: (a: unknown, x: unknown, i: number) => unknown, ...init: unknown[]) {
    const xs = all(this);
    return init.length ? xs.reduce((a, x, i) => f(a, x, i), init[0]) : xs.reduce((a, x, i) => f(a, x, i));
  });
}
