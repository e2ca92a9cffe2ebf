/**
 * The subgroup-matrix operations the sgmat forward kernel builds on, each checked alone on this
 * adapter against the same product on the CPU, so a wrong kernel result can be traced to the step
 * that differs. One JSON line a check with its largest error (0 where exact: the operands are
 * multiples of 1/8 in [−2, 2], whose f16 products sum exactly in f32):
 *
 *   wg-rowA-colB      A row-major and B column-major from workgroup memory (filled by scalar
 *                     stores), C = A·B stored row-major to storage: the score product's layout
 *   wg-rowA-rowB      B row-major: the P·V product's layout
 *   store-then-read   C stored to workgroup memory, a workgroupBarrier, then read by scalar loads
 *                     (each invocation its row's columns, as the softmax phase reads scores)
 *   branch-load       A loaded inside a branch only some subgroups take (uniform in each)
 *   bitcast-fill      A written through bitcast<vec4<f16>> of packed words (the bitcast the kernel's
 *                     tile staging does without)
 *   accumulate-8      eight products accumulated into one result (the H/K chain of the scores)
 *   sgmat kernel      the whole kernel on the device check's problem (sgmat-check.ts), 64- and
 *                     32-key tiles, tile rows padded by 16 bytes and by 64 (aligned to 64)
 *
 * Every check runs in each of the 4 subgroups of a 4·SG workgroup, on its own operands.
 * Run: ATTNLAB_WEBGPU_EXPERIMENTAL=1 node --import tsx benchmarks/harnesses/webgpu-sgmat-checks.ts
 */
import { USAGE } from '../../src/backends/webgpu/memory.js';
import { initWebgpu, webgpuContext } from '../../src/backends/webgpu/runtime.js';
import { checkSgmat } from '../../src/backends/webgpu/sgmat-check.js';
import { config } from '../../src/config.js';

const info = await initWebgpu({ experimental: config().webgpuExperimental });
const { device } = webgpuContext();
const row = (fields: Record<string, unknown>) => process.stdout.write(`${JSON.stringify(fields)}\n`);
// The adapter's own f16 → f32 configuration (info.subgroupMatrix is null where the kernel's check
// at device open rejected it: these checks are what tell why).
const offered = (
  (webgpuContext().adapter.info as { subgroupMatrixConfigs?: readonly Record<string, unknown>[] })
    .subgroupMatrixConfigs ?? []
).find((c) => c.componentType === 'f16' && c.resultComponentType === 'f32') as
  | { M: number; N: number; K: number }
  | undefined;
row({
  adapter: info.description || info.vendor,
  subgroupMatrix: info.subgroupMatrix,
  subgroupMatrixRejected: info.subgroupMatrixRejected,
  offered: offered ? { M: offered.M, N: offered.N, K: offered.K } : null,
  subgroupSizes: info.subgroupSizes,
});
if (!offered || !info.features.includes('shader-f16')) {
  row({
    skipped:
      'no f16 subgroup-matrix configuration (ATTNLAB_WEBGPU_EXPERIMENTAL=1 on a GPU with cooperative matrices)',
  });
  process.exit(0);
}
const { M, N, K } = offered;
const SG = info.subgroupSizes.max;
const WG = 4 * SG;
const CHAIN = 8;

/** Seeded operands: 4 subgroups × CHAIN × (M×K for A, K×N for B), multiples of 1/8 in [−2, 2]. */
let seed = 12345;
const draw = () => {
  seed = (seed * 1103515245 + 12345) % 2 ** 31;
  return (Math.floor((seed / 2 ** 31) * 33) - 16) / 8;
};
const aVals = Float32Array.from({ length: 4 * CHAIN * M * K }, draw);
const bVals = Float32Array.from({ length: 4 * CHAIN * K * N }, draw);

function upload(device: GPUDevice, values: Float32Array): GPUBuffer {
  const buffer = device.createBuffer({
    size: values.byteLength,
    usage: USAGE.STORAGE,
    mappedAtCreation: true,
  });
  new Float32Array(buffer.getMappedRange()).set(values);
  buffer.unmap();
  return buffer;
}

async function run(device: GPUDevice, code: string, outLength: number): Promise<Float32Array> {
  device.pushErrorScope('validation');
  const module = device.createShaderModule({ code });
  const messages = (await module.getCompilationInfo()).messages.filter((m) => m.type === 'error');
  const pipeline = device.createComputePipeline({ layout: 'auto', compute: { module, entryPoint: 'main' } });
  const error = await device.popErrorScope();
  if (messages.length || error)
    throw new Error(`${messages.map((m) => m.message).join('; ')} ${error?.message ?? ''}`);
  const a = upload(device, aVals);
  const b = upload(device, bVals);
  const out = device.createBuffer({ size: outLength * 4, usage: USAGE.STORAGE | USAGE.COPY_SRC });
  const read = device.createBuffer({ size: outLength * 4, usage: USAGE.MAP_READ | USAGE.COPY_DST });
  const encoder = device.createCommandEncoder();
  const pass = encoder.beginComputePass();
  pass.setPipeline(pipeline);
  pass.setBindGroup(
    0,
    device.createBindGroup({
      layout: pipeline.getBindGroupLayout(0),
      entries: [a, b, out].map((buffer, binding) => ({ binding, resource: { buffer } })),
    }),
  );
  pass.dispatchWorkgroups(1);
  pass.end();
  encoder.copyBufferToBuffer(out, 0, read, 0, outLength * 4);
  device.queue.submit([encoder.finish()]);
  await read.mapAsync(1);
  const result = new Float32Array(read.getMappedRange().slice(0));
  read.unmap();
  for (const x of [a, b, out, read]) x.destroy();
  return result;
}

/** C = Σ_c A_c·B_c for subgroup s over `chain` products (B_c as K×N, row-major in bVals). */
function expected(s: number, chain: number): Float64Array {
  const c = new Float64Array(M * N);
  for (let t = 0; t < chain; t++) {
    const a0 = (s * CHAIN + t) * M * K;
    const b0 = (s * CHAIN + t) * K * N;
    for (let i = 0; i < M; i++)
      for (let j = 0; j < N; j++) {
        let x = 0;
        for (let k = 0; k < K; k++) x += aVals[a0 + i * K + k] * bVals[b0 + k * N + j];
        c[i * N + j] += x;
      }
  }
  return c;
}

const left = `subgroup_matrix_left<f16, ${K}, ${M}>`;
const right = `subgroup_matrix_right<f16, ${N}, ${K}>`;
const result = `subgroup_matrix_result<f32, ${N}, ${M}>`;
/** Fills workgroup A (row-major, stride K) and B (column-major, stride K, or row-major, stride N) by scalar stores. */
const header = (
  bColMajor: boolean,
  bitcastFill = false,
) => `diagnostic(off, chromium.subgroup_matrix_uniformity);
enable f16;
enable subgroups;
enable chromium_experimental_subgroup_matrix;
@group(0) @binding(0) var<storage, read> A: array<f32>;
@group(0) @binding(1) var<storage, read> B: array<f32>;
@group(0) @binding(2) var<storage, read_write> C: array<f32>;
var<workgroup> wa: array<f16, ${4 * CHAIN * M * K}>;
var<workgroup> wb: array<f16, ${4 * CHAIN * K * N}>;
var<workgroup> wc: array<f32, ${4 * M * N}>;
fn fill(lid: u32) {
  ${
    bitcastFill
      ? `for (var e = lid * 4u; e < ${4 * CHAIN * M * K}u; e += ${WG * 4}u) {
    let w = vec2u(pack2x16float(vec2f(A[e], A[e + 1u])), pack2x16float(vec2f(A[e + 2u], A[e + 3u])));
    let h = bitcast<vec4<f16>>(w);
    wa[e] = h.x; wa[e + 1u] = h.y; wa[e + 2u] = h.z; wa[e + 3u] = h.w;
  }`
      : `for (var e = lid; e < ${4 * CHAIN * M * K}u; e += ${WG}u) { wa[e] = f16(A[e]); }`
  }
  for (var e = lid; e < ${4 * CHAIN * K * N}u; e += ${WG}u) {
    let blk = e / ${K * N}u;
    let k = (e % ${K * N}u) / ${N}u;
    let j = e % ${N}u;
    ${bColMajor ? `wb[blk * ${K * N}u + j * ${K}u + k] = f16(B[e]);` : 'wb[e] = f16(B[e]);'}
  }
  workgroupBarrier();
}`;

const checks: [string, boolean, number, string, boolean?][] = [
  [
    'wg-rowA-colB',
    true,
    1,
    `let c = subgroupMatrixMultiply<f32>(subgroupMatrixLoad<${left}>(&wa, sg * ${CHAIN * M * K}u, false, ${K}u),
    subgroupMatrixLoad<${right}>(&wb, sg * ${CHAIN * K * N}u, true, ${K}u));
  subgroupMatrixStore(&C, sg * ${M * N}u, c, false, ${N}u);`,
  ],
  [
    'wg-rowA-rowB',
    false,
    1,
    `let c = subgroupMatrixMultiply<f32>(subgroupMatrixLoad<${left}>(&wa, sg * ${CHAIN * M * K}u, false, ${K}u),
    subgroupMatrixLoad<${right}>(&wb, sg * ${CHAIN * K * N}u, false, ${N}u));
  subgroupMatrixStore(&C, sg * ${M * N}u, c, false, ${N}u);`,
  ],
  [
    'bitcast-fill',
    false,
    1,
    `let c = subgroupMatrixMultiply<f32>(subgroupMatrixLoad<${left}>(&wa, sg * ${CHAIN * M * K}u, false, ${K}u),
    subgroupMatrixLoad<${right}>(&wb, sg * ${CHAIN * K * N}u, false, ${N}u));
  subgroupMatrixStore(&C, sg * ${M * N}u, c, false, ${N}u);`,
    true,
  ],
  [
    'store-then-read',
    false,
    1,
    `let c = subgroupMatrixMultiply<f32>(subgroupMatrixLoad<${left}>(&wa, sg * ${CHAIN * M * K}u, false, ${K}u),
    subgroupMatrixLoad<${right}>(&wb, sg * ${CHAIN * K * N}u, false, ${N}u));
  subgroupMatrixStore(&wc, sg * ${M * N}u, c, false, ${N}u);
  workgroupBarrier();
  let per = ${(M * N) / SG}u;
  for (var x = 0u; x < per; x++) { let e = (lid % ${SG}u) * per + x; C[sg * ${M * N}u + e] = wc[sg * ${M * N}u + e]; }`,
  ],
  [
    'branch-load',
    false,
    1,
    `var a = ${left}();
  if (sg % 2u == 1u) { a = subgroupMatrixLoad<${left}>(&wa, sg * ${CHAIN * M * K}u, false, ${K}u); }
  else { a = subgroupMatrixLoad<${left}>(&wa, sg * ${CHAIN * M * K}u, false, ${K}u); }
  let c = subgroupMatrixMultiply<f32>(a, subgroupMatrixLoad<${right}>(&wb, sg * ${CHAIN * K * N}u, false, ${N}u));
  subgroupMatrixStore(&C, sg * ${M * N}u, c, false, ${N}u);`,
  ],
  [
    'accumulate-8',
    true,
    CHAIN,
    `var c = ${result}();
  for (var t = 0u; t < ${CHAIN}u; t++) {
    c = subgroupMatrixMultiplyAccumulate(subgroupMatrixLoad<${left}>(&wa, (sg * ${CHAIN}u + t) * ${M * K}u, false, ${K}u),
      subgroupMatrixLoad<${right}>(&wb, (sg * ${CHAIN}u + t) * ${K * N}u, true, ${K}u), c);
  }
  subgroupMatrixStore(&C, sg * ${M * N}u, c, false, ${N}u);`,
  ],
];

for (const [name, bColMajor, chain, body, bitcastFill] of checks) {
  const code = `${header(bColMajor, bitcastFill)}
  @compute @workgroup_size(${WG})
  fn main(@builtin(local_invocation_index) lid: u32) {
    fill(lid);
    let sg = lid / ${SG}u;
    ${body}
  }`;
  try {
    const got = await run(device, code, 4 * M * N);
    let worst = 0;
    let zeros = 0;
    for (let s = 0; s < 4; s++) {
      const want = expected(s, chain);
      for (let e = 0; e < M * N; e++) {
        const d = Math.abs(got[s * M * N + e] - want[e]);
        if (!(d <= worst)) worst = d;
        if (got[s * M * N + e] === 0 && want[e] !== 0) zeros++;
      }
    }
    // What a transposed B would have given, for the layout checks.
    row({
      check: name,
      M,
      N,
      K,
      maxError: worst,
      zerosWhereNonzero: zeros,
      first: Array.from(got.slice(0, 4)),
      want: Array.from(expected(0, chain).slice(0, 4)),
    });
  } catch (error) {
    row({ check: name, error: String(error) });
  }
}

// The whole sgmat kernel on the small problem the device check runs (sgmat-check.ts), with 64- and
// 32-key tiles, tile rows padded by 16 and by 64 bytes: null is a pass.
for (const pad of [16, 64]) {
  for (const keys of [64, 32]) {
    const reason = await checkSgmat(
      device,
      { M, N, K, sg: SG, keys, pad },
      info.limits.maxComputeWorkgroupStorageSize,
    );
    row({
      check: `sgmat kernel, ${keys}-key tiles, rows padded by ${pad} bytes`,
      failure: reason,
    });
  }
}
