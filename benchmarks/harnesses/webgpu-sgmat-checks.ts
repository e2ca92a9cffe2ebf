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
 *
 * Every check runs in each of the 4 subgroups of a 4·SG workgroup, on its own operands.
 * Run: ATTNLAB_WEBGPU_EXPERIMENTAL=1 node --import tsx benchmarks/harnesses/webgpu-sgmat-checks.ts
 */
import { USAGE } from '../../src/backends/webgpu/memory.js';
import { initWebgpu, webgpuContext } from '../../src/backends/webgpu/runtime.js';
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

// ---- The steps from the single operations toward the kernel ----
//
// Each step lays its operands out as the kernel does: tiles of 4·M rows (one M-row band a
// subgroup) with CHAIN blocks of K columns side by side in a row, rows `pad` bytes longer than the
// blocks, and changes one thing from the step before (the `adds` field says which). Subgroup s
// computes C_s = Σ_t A_{s,t}·B_{s,t} (A: rows s·M…, columns t·K…; B as K's tile, column-major: key
// rows s·N…, columns t·K…, or as V's tile, row-major: rows t·K…, columns s·N…) and stores it to
// the last N columns of its band of a 4·N-column f32 tile, read back by scalar loads.

interface Step {
  readonly name: string;
  readonly adds: string;
  /** Bytes each tile row is padded by. */
  readonly pad: number;
  /** B as V's tile (row-major), else as K's tile read column-major. */
  readonly rowB?: boolean;
  /** The products in a run-time loop (offsets from the loop counter), else unrolled. */
  readonly loop?: boolean;
  /** A's blocks loaded into variables first and kept over 3 passes of the products, barriers between. */
  readonly keepA?: boolean;
  /** A workgroupBarrier and a scalar store to another tile between the products. */
  readonly barriers?: boolean;
  /** C stored after half the products, scaled by 1 with scalar code, loaded back and accumulated on. */
  readonly roundTrip?: boolean;
  /** Small scalar workgroup variables and a 3-element f16 array declared before the tiles. */
  readonly smallFirst?: boolean;
  /** A's tile written as f16(f32 value) from a computed f32 (the P tile's conversion), not f16(A[e]). */
  readonly computedA?: boolean;
  /**
   * Each product's blocks written by scalar stores to the same place (block 0) in turn, between
   * barriers, and loaded from there: the key loop's tiles, rewritten at the same addresses.
   */
  readonly rewrite?: boolean;
  /** A's tile written 8 halves at a time from packed words (the kernel's put8 staging). */
  readonly put8?: boolean;
}

const steps: Step[] = [
  {
    name: 'tile-tight',
    adds: "the kernel's tile layout: 4 blocks a row, rows of 128 bytes, C in the last blocks",
    pad: 0,
  },
  {
    name: 'tile-pad16',
    adds: "rows padded by 16 bytes: 144-byte f16 rows, 272-byte f32 rows (the kernel's)",
    pad: 16,
  },
  { name: 'tile-pad16-rowB', adds: "B row-major (the P·V product's layout)", pad: 16, rowB: true },
  { name: 'tile-pad16-loop', adds: 'the products in a run-time loop', pad: 16, loop: true },
  {
    name: 'tile-pad16-barriers',
    adds: 'a barrier and scalar stores between the products',
    pad: 16,
    loop: true,
    barriers: true,
  },
  {
    name: 'tile-pad16-keepA',
    adds: 'A loaded once into variables, used over 3 passes',
    pad: 16,
    keepA: true,
  },
  {
    name: 'tile-pad16-roundtrip',
    adds: 'C stored, scaled by scalar code and loaded back as a result matrix',
    pad: 16,
    roundTrip: true,
  },
  {
    name: 'tile-pad16-smallfirst',
    adds: 'small workgroup variables declared before the tiles',
    pad: 16,
    smallFirst: true,
  },
  {
    name: 'tile-pad16-computedA',
    adds: "A written from computed f32 values (the P tile's f16 conversion)",
    pad: 16,
    computedA: true,
  },
  {
    name: 'tile-pad16-rewrite',
    adds: 'the blocks rewritten at one address every pass of a loop (the key loop)',
    pad: 16,
    rewrite: true,
  },
  { name: 'tile-tight-rewrite', adds: 'the same on unpadded rows', pad: 0, rewrite: true },
  {
    name: 'tile-pad16-put8',
    adds: "A's rows written 8 halves a time from packed words (the kernel's put8 staging)",
    pad: 16,
    put8: true,
  },
  { name: 'tile-pad64', adds: 'rows padded by 64 bytes', pad: 64 },
];

const TB = 4; // blocks a tile row (H = 64 at K = 16), and products a step

/** WGSL that writes A's tile (stride SA): one half a store, or 8 from packed words as put8 does. */
function fillA(st: Step, SA: number): string {
  const at = `((row / ${M}u) * ${CHAIN}u + col / ${K}u) * ${M * K}u + (row % ${M}u) * ${K}u + col % ${K}u`;
  if (!st.put8) {
    return `for (var e = lid; e < ${4 * M * TB * K}u; e += ${WG}u) {
    let row = e / ${TB * K}u;
    let col = e % ${TB * K}u;
    let v = A[${at}];
    wa[row * ${SA}u + col] = ${st.computedA ? 'f16(v * one)' : 'f16(v)'};
  }`;
  }
  return `for (var e = lid * 8u; e < ${4 * M * TB * K}u; e += ${WG * 8}u) {
    let row = e / ${TB * K}u;
    let col = e % ${TB * K}u;
    let at = ${at};
    let x = vec4u(pack2x16float(vec2f(A[at], A[at + 1u])), pack2x16float(vec2f(A[at + 2u], A[at + 3u])),
      pack2x16float(vec2f(A[at + 4u], A[at + 5u])), pack2x16float(vec2f(A[at + 6u], A[at + 7u])));
    let a = unpack2x16float(x.x);
    let b = unpack2x16float(x.y);
    let c = unpack2x16float(x.z);
    let d = unpack2x16float(x.w);
    let w = row * ${SA}u + col;
    wa[w] = f16(a.x); wa[w + 1u] = f16(a.y); wa[w + 2u] = f16(b.x); wa[w + 3u] = f16(b.y);
    wa[w + 4u] = f16(c.x); wa[w + 5u] = f16(c.y); wa[w + 6u] = f16(d.x); wa[w + 7u] = f16(d.y);
  }`;
}

function stepSource(st: Step): string {
  const SA = TB * K + st.pad / 2;
  const SB = (st.rowB ? 4 * N : TB * K) + st.pad / 2;
  const SC = 4 * N + st.pad / 4;
  const aAt = (t: string) => `sg * ${M * SA}u + (${t}) * ${K}u`;
  const bAt = (t: string) =>
    st.rowB ? `(${t}) * ${K * SB}u + sg * ${N}u` : `sg * ${N * SB}u + (${t}) * ${K}u`;
  const loadA = (t: string) => `subgroupMatrixLoad<${left}>(&wa, ${aAt(t)}, false, ${SA}u)`;
  const loadB = (t: string) =>
    `subgroupMatrixLoad<${right}>(&wb, ${bAt(t)}, ${st.rowB ? 'false' : 'true'}, ${SB}u)`;
  const cAt = `sg * ${M * SC}u + ${3 * N}u`;
  const mma = (t: number) => `c = subgroupMatrixMultiplyAccumulate(${loadA(`${t}u`)}, ${loadB(`${t}u`)}, c);`;
  let body: string;
  if (st.rewrite) {
    // Pass t copies block (s, t) of A and B into block (s, 0)'s place, then multiplies from there.
    body = `var c = ${result}();
  for (var t = 0u; t < ${TB}u; t++) {
    workgroupBarrier();
    for (var e = lid; e < ${4 * M * K}u; e += ${WG}u) {
      let row = e / ${K}u;
      let col = e % ${K}u;
      wa[row * ${SA}u + col] = f16(A[((row / ${M}u) * ${CHAIN}u + t) * ${M * K}u + (row % ${M}u) * ${K}u + col]);
    }
    for (var e = lid; e < ${4 * K * N}u; e += ${WG}u) {
      let s = e / ${K * N}u;
      let k = (e % ${K * N}u) / ${N}u;
      let j = e % ${N}u;
      let v = B[(s * ${CHAIN}u + t) * ${K * N}u + k * ${N}u + j];
      ${st.rowB ? `wb[k * ${SB}u + s * ${N}u + j] = f16(v);` : `wb[(s * ${N}u + j) * ${SB}u + k] = f16(v);`}
    }
    workgroupBarrier();
    c = subgroupMatrixMultiplyAccumulate(${loadA('0u')}, ${loadB('0u')}, c);
  }
  subgroupMatrixStore(&wc, ${cAt}, c, false, ${SC}u);`;
  } else if (st.keepA) {
    body = `${[0, 1, 2, 3].map((t) => `let a${t} = ${loadA(`${t}u`)};`).join('\n  ')}
  for (var round = 0u; round < 3u; round++) {
    var c = ${result}();
    ${[0, 1, 2, 3].map((t) => `c = subgroupMatrixMultiplyAccumulate(a${t}, ${loadB(`${t}u`)}, c);`).join('\n    ')}
    subgroupMatrixStore(&wc, ${cAt}, c, false, ${SC}u);
    workgroupBarrier();
    wd[lid] = f32(round);
    workgroupBarrier();
  }`;
  } else if (st.loop) {
    body = `var c = ${result}();
  for (var t = 0u; t < ${TB}u; t++) {
    c = subgroupMatrixMultiplyAccumulate(${loadA('t')}, ${loadB('t')}, c);
    ${st.barriers ? 'workgroupBarrier();\n    wd[lid] = f32(t);\n    workgroupBarrier();' : ''}
  }
  subgroupMatrixStore(&wc, ${cAt}, c, false, ${SC}u);`;
  } else if (st.roundTrip) {
    body = `var c = ${result}();
  ${mma(0)}
  ${mma(1)}
  subgroupMatrixStore(&wc, ${cAt}, c, false, ${SC}u);
  workgroupBarrier();
  for (var e = lid % ${SG}u; e < ${M * N}u; e += ${SG}u) {
    let at = (sg * ${M}u + e / ${N}u) * ${SC}u + ${3 * N}u + e % ${N}u;
    wc[at] = wc[at] * one;
  }
  workgroupBarrier();
  c = subgroupMatrixLoad<${result}>(&wc, ${cAt}, false, ${SC}u);
  workgroupBarrier();
  ${mma(2)}
  ${mma(3)}
  subgroupMatrixStore(&wc, ${cAt}, c, false, ${SC}u);`;
  } else {
    body = `var c = ${result}();
  ${[0, 1, 2, 3].map(mma).join('\n  ')}
  subgroupMatrixStore(&wc, ${cAt}, c, false, ${SC}u);`;
  }
  const small = st.smallFirst
    ? `var<workgroup> small_i: array<i32, 5>;
var<workgroup> small_a: atomic<u32>;
var<workgroup> small_h: array<f16, 3>;
`
    : '';
  return `diagnostic(off, chromium.subgroup_matrix_uniformity);
enable f16;
enable subgroups;
enable chromium_experimental_subgroup_matrix;
@group(0) @binding(0) var<storage, read> A: array<f32>;
@group(0) @binding(1) var<storage, read> B: array<f32>;
@group(0) @binding(2) var<storage, read_write> C: array<f32>;
${small}var<workgroup> wa: array<f16, ${4 * M * SA}>;
var<workgroup> wb: array<f16, ${(st.rowB ? TB * K : 4 * N) * SB}>;
var<workgroup> wc: array<f32, ${4 * M * SC}>;
var<workgroup> wd: array<f32, ${WG}>;
@compute @workgroup_size(${WG})
fn main(@builtin(local_invocation_index) lid: u32) {
  let sg = lid / ${SG}u;
  let one = f32(A[0] == A[0]);
  ${st.smallFirst ? 'if (lid == 0u) { small_i[lid + 1u] = 7; atomicAdd(&small_a, 1u); small_h[lid + 2u] = f16(A[1]); }' : ''}
  // A: row (s, i), column (t, k) ← block (s, t) of A's values.
  ${fillA(st, SA)}
  // B: element (k, j) of block (s, t).
  for (var e = lid; e < ${4 * TB * K * N}u; e += ${WG}u) {
    let blk = e / ${K * N}u;
    let s = blk / ${TB}u;
    let t = blk % ${TB}u;
    let k = (e % ${K * N}u) / ${N}u;
    let j = e % ${N}u;
    let v = B[(s * ${CHAIN}u + t) * ${K * N}u + k * ${N}u + j];
    ${st.rowB ? `wb[(t * ${K}u + k) * ${SB}u + s * ${N}u + j] = f16(v);` : `wb[(s * ${N}u + j) * ${SB}u + t * ${K}u + k] = f16(v);`}
  }
  workgroupBarrier();
  ${body}
  workgroupBarrier();
  for (var e = lid % ${SG}u; e < ${M * N}u; e += ${SG}u) {
    C[sg * ${M * N}u + e] = wc[(sg * ${M}u + e / ${N}u) * ${SC}u + ${3 * N}u + e % ${N}u];
  }
  ${st.smallFirst ? 'if (lid == 0u && small_i[1] == 12345 && atomicLoad(&small_a) == 9u) { C[0] = f32(small_h[2]); }' : ''}
}`;
}

for (const st of steps) {
  try {
    const got = await run(device, stepSource(st), 4 * M * N);
    let worst = 0;
    const badSubgroups: number[] = [];
    for (let s = 0; s < 4; s++) {
      const want = expected(s, TB);
      let bad = false;
      for (let e = 0; e < M * N; e++) {
        const d = Math.abs(got[s * M * N + e] - want[e]);
        if (!(d <= worst)) worst = d;
        if (!(d === 0)) bad = true;
      }
      if (bad) badSubgroups.push(s);
    }
    row({ step: st.name, adds: st.adds, maxError: worst, badSubgroups });
  } catch (error) {
    row({ step: st.name, adds: st.adds, error: String(error) });
  }
}
