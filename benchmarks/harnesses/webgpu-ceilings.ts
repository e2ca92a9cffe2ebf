/**
 * What a bare WGSL kernel reaches on this WebGPU adapter: the ceilings the webgpu attention kernels
 * sit under (as hbm-read-ceiling.cu is for the CUDA decode kernel). One JSON line per probe:
 *
 *   fma-f32     vec4<f32> fma chains, 8 independent a invocation: the CUDA-core f32 rate
 *   fma-f16     the same on vec4<f16> (shader-f16 only; NVIDIA packs two halves an instruction)
 *   sgmat       subgroupMatrixMultiplyAccumulate on f16 operands into f32 (and f16) accumulators,
 *               4 independent a subgroup (started at 0, 1, 2, 3, so no two chains can be merged),
 *               operands in registers: the cooperative-matrix rate
 *               (chromium-experimental-subgroup-matrix only)
 *   read        every invocation streams 16-byte loads over a buffer, grid-stride, 4 in flight, and
 *               xors them (the bandwidth a decode kernel can reach)
 *   copy        copyBufferToBuffer of the same buffer (read + write counted)
 *
 * Time: wall clock from submit to onSubmittedWorkDone over `--reps` dispatches after a warm-up
 * (each dispatch runs ≥ 10 ms at the default sizes on an H100, so the ~50 µs of submit overhead is
 * under 1%), median. Run (ATTNLAB_WEBGPU_EXPERIMENTAL=1 asks Dawn for subgroup matrices and f16):
 *   node --import tsx benchmarks/harnesses/webgpu-ceilings.ts [--reps 5] [--small]
 * `--small` shrinks the work 64× for a software adapter.
 */
import { USAGE } from '../../src/backends/webgpu/memory.js';
import { initWebgpu, webgpuContext } from '../../src/backends/webgpu/runtime.js';
import { config } from '../../src/config.js';

const args = process.argv.slice(2);
const reps = Number(args[args.indexOf('--reps') + 1] || 5);
const small = args.includes('--small');

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
}

function row(fields: Record<string, unknown>): void {
  process.stdout.write(`${JSON.stringify(fields)}\n`);
}

const info = await initWebgpu({ experimental: config().webgpuExperimental });
const { device } = webgpuContext();
row({
  adapter: [info.vendor, info.architecture, info.description].filter(Boolean).join(' '),
  features: info.features,
  subgroupSizes: info.subgroupSizes,
  subgroupMatrix: info.subgroupMatrix,
  subgroupMatrixConfigs: (
    (webgpuContext().adapter.info as { subgroupMatrixConfigs?: readonly Record<string, unknown>[] })
      .subgroupMatrixConfigs ?? []
  ).map((c) => ({
    componentType: c.componentType,
    resultComponentType: c.resultComponentType,
    M: c.M,
    N: c.N,
    K: c.K,
  })),
  limits: info.limits,
});

/** Compiles `code`, reporting WGSL errors as a thrown Error with the compiler's messages. */
async function pipeline(code: string, label: string): Promise<GPUComputePipeline> {
  device.pushErrorScope('validation');
  const module = device.createShaderModule({ code, label });
  const messages = (await module.getCompilationInfo()).messages.filter((m) => m.type === 'error');
  const pipe = device.createComputePipeline({
    layout: 'auto',
    compute: { module, entryPoint: 'main' },
    label,
  });
  const error = await device.popErrorScope();
  if (messages.length > 0 || error) {
    throw new Error(
      `${label}: ${messages.map((m) => `${m.lineNum}:${m.linePos} ${m.message}`).join('; ')}${error ? ` ${error.message}` : ''}`,
    );
  }
  return pipe;
}

/** Median ms of one dispatch of `groups` workgroups with `buffers` bound in order. */
async function time(
  pipe: GPUComputePipeline,
  buffers: GPUBuffer[],
  groups: [number, number],
): Promise<number> {
  const bind = device.createBindGroup({
    layout: pipe.getBindGroupLayout(0),
    entries: buffers.map((buffer, binding) => ({ binding, resource: { buffer } })),
  });
  const times: number[] = [];
  for (let r = 0; r <= reps; r++) {
    const start = performance.now();
    const encoder = device.createCommandEncoder();
    const pass = encoder.beginComputePass();
    pass.setPipeline(pipe);
    pass.setBindGroup(0, bind);
    pass.dispatchWorkgroups(groups[0], groups[1]);
    pass.end();
    device.queue.submit([encoder.finish()]);
    await device.queue.onSubmittedWorkDone();
    if (r > 0) times.push(performance.now() - start);
  }
  return median(times);
}

function uniform(words: number[]): GPUBuffer {
  const buffer = device.createBuffer({
    size: 16 * Math.ceil(words.length / 4),
    usage: USAGE.UNIFORM,
    mappedAtCreation: true,
  });
  new Uint32Array(buffer.getMappedRange()).set(words);
  buffer.unmap();
  return buffer;
}

const storage = (bytes: number) =>
  device.createBuffer({ size: bytes, usage: USAGE.STORAGE | USAGE.COPY_SRC | USAGE.COPY_DST });

// FMA chains: 8 independent accumulators a invocation hide the 4-cycle latency; `iters` comes from
// a uniform so the loop cannot be folded, and the result is stored so it cannot be dropped.
const WG = 256;
const FMA_GROUPS = small ? 64 : 132 * 64;
const FMA_ITERS = small ? 256 : 4096;
for (const type of ['f32', 'f16'] as const) {
  if (type === 'f16' && !info.features.includes('shader-f16')) {
    row({ probe: 'fma-f16', skipped: 'no shader-f16 on this device' });
    continue;
  }
  const t = type === 'f32' ? 'vec4f' : 'vec4<f16>';
  const code = `${type === 'f16' ? 'enable f16;' : ''}
struct P { iters: u32, x: f32, y: f32, pad: u32 }
@group(0) @binding(0) var<uniform> params: P;
@group(0) @binding(1) var<storage, read_write> out: array<${t}>;
@compute @workgroup_size(${WG})
fn main(@builtin(global_invocation_id) gid: vec3u) {
  let x = ${t}(${type}(params.x));
  let y = ${t}(${type}(params.y));
  var a0 = ${t}(${type}(gid.x & 7u));
  var a1 = a0 + y; var a2 = a1 + y; var a3 = a2 + y; var a4 = a3 + y; var a5 = a4 + y; var a6 = a5 + y; var a7 = a6 + y;
  for (var i = 0u; i < params.iters; i++) {
    a0 = fma(a0, x, y); a1 = fma(a1, x, y); a2 = fma(a2, x, y); a3 = fma(a3, x, y);
    a4 = fma(a4, x, y); a5 = fma(a5, x, y); a6 = fma(a6, x, y); a7 = fma(a7, x, y);
  }
  out[gid.x] = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7;
}`;
  try {
    const pipe = await pipeline(code, `fma-${type}`);
    const params = uniform([FMA_ITERS, 0x3f7fff58, 0x3a83126f, 0]); // x ≈ 0.99999, y ≈ 0.001: stays finite
    const out = storage(FMA_GROUPS * WG * 16);
    const ms = await time(pipe, [params, out], [FMA_GROUPS, 1]);
    const flops = 2 * 4 * 8 * FMA_ITERS * FMA_GROUPS * WG;
    row({ probe: `fma-${type}`, ms, tflops: flops / ms / 1e9, workgroups: FMA_GROUPS, iters: FMA_ITERS });
    params.destroy();
    out.destroy();
  } catch (error) {
    row({ probe: `fma-${type}`, error: String(error) });
  }
}

// Subgroup matrices: every f16 configuration the adapter lists, with f32 (and f16) results.
{
  const configs = (
    (webgpuContext().adapter.info as { subgroupMatrixConfigs?: readonly Record<string, unknown>[] })
      .subgroupMatrixConfigs ?? []
  ).filter((c) => c.componentType === 'f16') as unknown as readonly {
    componentType: string;
    resultComponentType: string;
    M: number;
    N: number;
    K: number;
  }[];
  if (
    !info.features.includes('chromium-experimental-subgroup-matrix') ||
    !info.features.includes('shader-f16')
  ) {
    row({
      probe: 'sgmat',
      skipped: 'no chromium-experimental-subgroup-matrix with shader-f16 on this device',
    });
  } else if (configs.length === 0) {
    row({ probe: 'sgmat', skipped: 'the adapter lists no f16 subgroup-matrix configuration' });
  }
  for (const c of configs) {
    const sg = info.subgroupSizes.max;
    const wg = 4 * sg;
    const r = c.resultComponentType;
    const code = `diagnostic(off, chromium.subgroup_matrix_uniformity);
enable f16;
enable chromium_experimental_subgroup_matrix;
struct P { iters: u32, pad0: u32, pad1: u32, pad2: u32 }
@group(0) @binding(0) var<uniform> params: P;
@group(0) @binding(1) var<storage, read_write> out: array<${r}>;
@group(0) @binding(2) var<storage, read_write> subgroups: atomic<u32>;
var<workgroup> a_tile: array<f16, ${c.M * c.K}>;
var<workgroup> b_tile: array<f16, ${c.K * c.N}>;
@compute @workgroup_size(${wg})
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3u,
        @builtin(subgroup_invocation_id) lane: u32) {
  for (var e = lid; e < ${c.M * c.K}u; e += ${wg}u) { a_tile[e] = f16(e % 7u) * 0.001h; }
  for (var e = lid; e < ${c.K * c.N}u; e += ${wg}u) { b_tile[e] = f16(e % 5u) * 0.001h; }
  workgroupBarrier();
  let a = subgroupMatrixLoad<subgroup_matrix_left<f16, ${c.K}, ${c.M}>>(&a_tile, 0u, false, ${c.K}u);
  let b = subgroupMatrixLoad<subgroup_matrix_right<f16, ${c.N}, ${c.K}>>(&b_tile, 0u, false, ${c.N}u);
  var c0 = subgroup_matrix_result<${r}, ${c.N}, ${c.M}>(${r}(0));
  var c1 = subgroup_matrix_result<${r}, ${c.N}, ${c.M}>(${r}(1));
  var c2 = subgroup_matrix_result<${r}, ${c.N}, ${c.M}>(${r}(2));
  var c3 = subgroup_matrix_result<${r}, ${c.N}, ${c.M}>(${r}(3));
  for (var i = 0u; i < params.iters; i++) {
    c0 = subgroupMatrixMultiplyAccumulate(a, b, c0);
    c1 = subgroupMatrixMultiplyAccumulate(a, b, c1);
    c2 = subgroupMatrixMultiplyAccumulate(a, b, c2);
    c3 = subgroupMatrixMultiplyAccumulate(a, b, c3);
  }
  let base = (wid.x * 4u + lid / ${sg}u) * ${4 * c.M * c.N}u;
  subgroupMatrixStore(&out, base, c0, false, ${c.N}u);
  subgroupMatrixStore(&out, base + ${c.M * c.N}u, c1, false, ${c.N}u);
  subgroupMatrixStore(&out, base + ${2 * c.M * c.N}u, c2, false, ${c.N}u);
  subgroupMatrixStore(&out, base + ${3 * c.M * c.N}u, c3, false, ${c.N}u);
  if (lane == 0u) { atomicAdd(&subgroups, 1u); }
}`;
    const shape = { M: c.M, N: c.N, K: c.K, result: r };
    try {
      const pipe = await pipeline(code, `sgmat-${c.M}x${c.N}x${c.K}-${r}`);
      const groups = small ? 16 : 132 * 16;
      const iters = small ? 64 : 4096;
      const params = uniform([iters, 0, 0, 0]);
      const out = storage(groups * 4 * 4 * c.M * c.N * 4);
      const counter = storage(16);
      const ms = await time(pipe, [params, out, counter], [groups, 1]);
      // The counter sums every run's subgroups: warm-up plus reps.
      const read = device.createBuffer({ size: 16, usage: USAGE.MAP_READ | USAGE.COPY_DST });
      const encoder = device.createCommandEncoder();
      encoder.copyBufferToBuffer(counter, 0, read, 0, 16);
      device.queue.submit([encoder.finish()]);
      await read.mapAsync(1);
      const subgroups = new Uint32Array(read.getMappedRange())[0] / (reps + 1);
      read.unmap();
      const flops = 2 * c.M * c.N * c.K * 4 * iters * subgroups;
      row({ probe: 'sgmat', ...shape, ms, tflops: flops / ms / 1e9, subgroups, iters });
      for (const b of [params, out, counter, read]) b.destroy();
    } catch (error) {
      row({ probe: 'sgmat', ...shape, error: String(error) });
    }
  }
}

// Read bandwidth, and the copy engine's for comparison.
{
  const bytes = Math.min(small ? 64 << 20 : 1 << 30, info.limits.maxStorageBufferBindingSize & ~0xffff);
  const buffer = storage(bytes);
  const sink = storage(1 << 20);
  const groups = small ? 64 : 132 * 32;
  const threads = groups * WG;
  const code = `
struct P { n: u32, pad0: u32, pad1: u32, pad2: u32 }
@group(0) @binding(0) var<uniform> params: P;
@group(0) @binding(1) var<storage, read> src: array<vec4u>;
@group(0) @binding(2) var<storage, read_write> sink: array<vec4u>;
@compute @workgroup_size(${WG})
fn main(@builtin(global_invocation_id) gid: vec3u) {
  var acc = vec4u(0u);
  let stride = ${threads}u;
  var i = gid.x;
  // Four loads in flight an iteration.
  for (; i + 3u * stride < params.n; i += 4u * stride) {
    let a = src[i]; let b = src[i + stride]; let c = src[i + 2u * stride]; let d = src[i + 3u * stride];
    acc ^= a ^ b ^ c ^ d;
  }
  for (; i < params.n; i += stride) { acc ^= src[i]; }
  if (all(acc == vec4u(0x9e3779b9u))) { sink[gid.x & 0xffffu] = acc; }
}`;
  try {
    const pipe = await pipeline(code, 'read');
    const params = uniform([bytes / 16, 0, 0, 0]);
    const ms = await time(pipe, [params, buffer, sink], [groups, 1]);
    row({ probe: 'read', bytes, ms, gbs: bytes / ms / 1e6, workgroups: groups });
    params.destroy();
  } catch (error) {
    row({ probe: 'read', error: String(error) });
  }
  const target = storage(bytes);
  const times: number[] = [];
  for (let r = 0; r <= reps; r++) {
    const start = performance.now();
    const encoder = device.createCommandEncoder();
    encoder.copyBufferToBuffer(buffer, 0, target, 0, bytes);
    device.queue.submit([encoder.finish()]);
    await device.queue.onSubmittedWorkDone();
    if (r > 0) times.push(performance.now() - start);
  }
  const ms = median(times);
  row({ probe: 'copy', bytes, ms, gbs: (2 * bytes) / ms / 1e6 });
  for (const b of [buffer, sink, target]) b.destroy();
}
