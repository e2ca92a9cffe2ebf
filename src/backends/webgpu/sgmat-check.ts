/**
 * The subgroup-matrix kernel checked on the device before it is used: cooperative matrices are an
 * experimental path (Dawn's chromium_experimental_subgroup_matrix over Vulkan's extension), and a
 * driver or a translation step that gets one layout or ordering wrong would return wrong outputs
 * with no error. So when a device offers an f16 configuration, the sgmat kernel runs once on a
 * small problem (B=1, T=S=80, N=K=1, H=Hv=64: a full and a partial tile of keys and of query rows)
 * and its output is compared with the float64 result on the same f16 inputs; past the bound the
 * device's shape is dropped (the tiled kernel runs) and the reason is kept in WebgpuInfo.
 */
import { decodeValue, encodeValue } from '../../tensor/dtype.js';
import {
  type MatrixShape,
  sgmatKeys,
  sgmatSource,
  sgmatSubgroups,
  sgmatTraceLayout,
  sgmatTraceLength,
  type TraceSection,
} from './sgmat-source.js';
import { bindings, type ForwardVariant } from './variant.js';

const T = 80;
const H = 64;
/** Output error past which the kernel is refused: 10× a float16 rounding of outputs ≤ 4 (2^-9 each). */
const BOUND = 2e-2;

/** Seeded values that are f16-exact: multiples of 1/16 in [−2, 2]. */
function values(count: number, seed: number): Float64Array {
  let s = seed;
  return Float64Array.from({ length: count }, () => {
    s = (s * 1103515245 + 12345) % 2 ** 31;
    return (Math.floor((s / 2 ** 31) * 65) - 32) / 16;
  });
}

function reference(q: Float64Array, k: Float64Array, v: Float64Array, scale: number): Float64Array {
  const out = new Float64Array(T * H);
  const s = new Float64Array(T);
  for (let i = 0; i < T; i++) {
    let max = -Infinity;
    for (let j = 0; j < T; j++) {
      let x = 0;
      for (let h = 0; h < H; h++) x += q[i * H + h] * k[j * H + h];
      s[j] = x * scale;
      max = Math.max(max, s[j]);
    }
    let sum = 0;
    for (let j = 0; j < T; j++) {
      s[j] = Math.exp(s[j] - max);
      sum += s[j];
    }
    for (let j = 0; j < T; j++) for (let h = 0; h < H; h++) out[i * H + h] += (s[j] / sum) * v[j * H + h];
  }
  return out;
}

/** The check's inputs (T×H each, f16-exact) and scale. */
export function checkInputs(): { q: Float64Array; k: Float64Array; v: Float64Array; scale: number } {
  const [q, k, v] = [1, 2, 3].map((seed) => values(T * H, seed));
  return { q, k, v, scale: 1 / Math.sqrt(H) };
}

/**
 * What each section of the kernel's trace (sgmat-source.ts: TRACE_SECTIONS) holds on the check's
 * problem in workgroup 0 on its first key tile: invocation ids as the kernel derives them, q and
 * K's rows (f16-exact), the raw scores q·kᵀ (exact in f32: multiples of 1/256 below 2^8), the
 * weights e^(s·scale − the tile's row max) as f16, and the accumulator Σ p·v.
 */
export function traceExpectation(v: ForwardVariant): Record<TraceSection, Float64Array> {
  const m = v.matrix as MatrixShape;
  const layout = sgmatTraceLayout(v);
  const { q, k, v: values, scale } = checkInputs();
  const rows = v.rows;
  const bc = v.bc;
  const tpr = m.sg / m.M;
  const ids = new Float64Array(layout.ids.length);
  for (let lid = 0; lid * 8 < ids.length; lid++)
    ids.set([lid, Math.floor(lid / m.sg), lid % m.sg, m.sg, Math.floor(lid / tpr), lid % tpr, 0, T], lid * 8);
  const rowsOf = (x: Float64Array, count: number, length: number) =>
    length === 0 ? new Float64Array(0) : x.slice(0, count * H);
  const s = new Float64Array(rows * bc);
  for (let i = 0; i < rows; i++)
    for (let j = 0; j < bc; j++) {
      let x = 0;
      for (let h = 0; h < H; h++) x += q[i * H + h] * k[j * H + h];
      s[i * bc + j] = x;
    }
  const p = new Float64Array(rows * bc);
  for (let i = 0; i < rows; i++) {
    let max = -Infinity;
    for (let j = 0; j < bc; j++) max = Math.max(max, s[i * bc + j] * scale);
    for (let j = 0; j < bc; j++)
      p[i * bc + j] = decodeValue(encodeValue(Math.exp(s[i * bc + j] * scale - max), 'float16'), 'float16');
  }
  const acc = new Float64Array(rows * H);
  for (let i = 0; i < rows; i++)
    for (let j = 0; j < bc; j++)
      for (let d = 0; d < H; d++) acc[i * H + d] += p[i * bc + j] * values[j * H + d];
  return {
    ids,
    q: rowsOf(q, rows, layout.q.length),
    kTile: rowsOf(k, bc, layout.kTile.length),
    kMat: rowsOf(k, bc, layout.kMat.length),
    sDirect: s,
    sTile: s,
    p,
    acc,
  };
}

/** The check's variant for a shape and tile: B=1, T=S=80, N=K=1, H=Hv=64, float16, no masking. */
export function checkVariant(shape: MatrixShape, bc: number): ForwardVariant {
  return {
    kernel: 'sgmat',
    matrix: shape,
    dtype: 'float16',
    H,
    Hv: H,
    rows: sgmatSubgroups(shape) * shape.M,
    bc,
    bias: null,
    mask: false,
    causal: false,
    window: false,
    lengths: false,
    lse: false,
    split: false,
    vec: 4,
    paged: false,
    packedQuery: false,
    packedKv: false,
    lanes: 1,
  };
}

/**
 * The sgmat kernel of `shape` on the check's problem: its output (T×H), and with `trace` what the
 * traced build wrote (sgmat-source.ts: sgmatTraceLayout); a string where it did not run.
 * `rewrite` changes the WGSL before it compiles (the tests run the kernel with its matrix
 * operations emulated in plain WGSL on adapters without them).
 */
export async function runSgmatCheck(
  device: GPUDevice,
  shape: MatrixShape,
  storageBytes: number,
  trace = false,
  rewrite: (code: string) => string = (code) => code,
): Promise<{ variant: ForwardVariant; got: Float64Array; trace: Float64Array | null } | string> {
  const bc = sgmatKeys(H, H, shape, storageBytes);
  if (bc === null) return `no tile of the sgmat kernel fits at H=${H}`;
  const variant = checkVariant(shape, bc);
  const { q, k, v, scale } = checkInputs();
  const traceLength = trace ? sgmatTraceLength(variant) : 0;
  const outLength = T * H * 2;
  const params = new ArrayBuffer(96);
  new Uint32Array(params).set([1, T, T, 1, 1, 0, 0, 0]);
  new Float32Array(params)[8] = scale;
  const usage = { STORAGE: 128, UNIFORM: 64, COPY_SRC: 4, COPY_DST: 8, MAP_READ: 1 };
  const upload = (bytes: ArrayBuffer, use: number) => {
    const buffer = device.createBuffer({ size: bytes.byteLength, usage: use, mappedAtCreation: true });
    new Uint8Array(buffer.getMappedRange()).set(new Uint8Array(bytes));
    buffer.unmap();
    return buffer;
  };
  const half = (x: Float64Array) =>
    Uint16Array.from(x, (e) => encodeValue(e, 'float16')).buffer as ArrayBuffer;
  const buffers: Record<string, GPUBuffer> = {
    params: upload(params, usage.UNIFORM),
    q: upload(half(q), usage.STORAGE),
    k: upload(half(k), usage.STORAGE),
    v: upload(half(v), usage.STORAGE),
    o: device.createBuffer({ size: T * H * 2, usage: usage.STORAGE | usage.COPY_SRC }),
    trace: device.createBuffer({
      size: Math.max(traceLength * 4, 16),
      usage: usage.STORAGE | usage.COPY_SRC,
    }),
  };
  const read = device.createBuffer({ size: outLength, usage: usage.MAP_READ | usage.COPY_DST });
  const readTrace = device.createBuffer({
    size: Math.max(traceLength * 4, 16),
    usage: usage.MAP_READ | usage.COPY_DST,
  });
  const names = [...bindings(variant), ...(trace ? ['trace'] : [])];
  try {
    device.pushErrorScope('validation');
    const module = device.createShaderModule({
      code: rewrite(sgmatSource(variant, trace)),
      label: 'sgmat check',
    });
    const pipeline = device.createComputePipeline({
      layout: 'auto',
      compute: { module, entryPoint: 'main' },
    });
    const encoder = device.createCommandEncoder();
    const pass = encoder.beginComputePass();
    pass.setPipeline(pipeline);
    pass.setBindGroup(
      0,
      device.createBindGroup({
        layout: pipeline.getBindGroupLayout(0),
        entries: names.map((name, binding) => ({ binding, resource: { buffer: buffers[name] } })),
      }),
    );
    pass.dispatchWorkgroups(Math.ceil(T / variant.rows), 1, 1);
    pass.end();
    encoder.copyBufferToBuffer(buffers.o, 0, read, 0, outLength);
    if (trace) encoder.copyBufferToBuffer(buffers.trace, 0, readTrace, 0, traceLength * 4);
    device.queue.submit([encoder.finish()]);
    const error = await device.popErrorScope();
    if (error) return `the sgmat kernel did not build: ${error.message.split('\n')[0]}`;
    await read.mapAsync(1);
    const got = Float64Array.from(new Uint16Array(read.getMappedRange().slice(0)), (x) =>
      decodeValue(x, 'float16'),
    );
    read.unmap();
    let traced: Float64Array | null = null;
    if (trace) {
      await readTrace.mapAsync(1);
      traced = Float64Array.from(new Float32Array(readTrace.getMappedRange().slice(0, traceLength * 4)));
      readTrace.unmap();
    }
    return { variant, got, trace: traced };
  } catch (error) {
    return `the sgmat check failed: ${error instanceof Error ? error.message : String(error)}`;
  } finally {
    for (const buffer of [...Object.values(buffers), read, readTrace]) buffer.destroy();
  }
}

/** The largest difference of an output of the check's problem (T×H) from the float64 result. */
export function checkOutputError(got: ArrayLike<number>): number {
  const { q, k, v, scale } = checkInputs();
  const want = reference(q, k, v, scale);
  let worst = 0;
  for (let e = 0; e < T * H; e++) {
    const d = Math.abs(got[e] - want[e]);
    if (!(d <= worst)) worst = d;
  }
  return worst;
}

/**
 * Null where the sgmat kernel of `shape` matches the float64 result on this device, else why not
 * (the largest error, or the error Dawn reported).
 */
export async function checkSgmat(
  device: GPUDevice,
  shape: MatrixShape,
  storageBytes: number,
  rewrite?: (code: string) => string,
): Promise<string | null> {
  const ran = await runSgmatCheck(device, shape, storageBytes, false, rewrite);
  if (typeof ran === 'string') return ran;
  const worst = checkOutputError(ran.got);
  return worst <= BOUND
    ? null
    : `the sgmat kernel's output was off by ${worst.toPrecision(3)} (bound ${BOUND}) on a B=1 T=S=${T} H=${H} check`;
}

/**
 * The layouts the device check tries, in order of speed, each avoiding one more thing the
 * single-operation checks never did: rows padded by 16 bytes (no bank conflicts) with q held in
 * variables over the key loop; then that layout with one change each that none of the
 * single-operation checks needed (a plain first product, a prologue without atomics or branches on
 * the invocation, loads fenced by a uniform load after their barrier, K's tile transposed, the row
 * reductions through workgroup memory rather than subgroup shuffles), all five at once, and all five
 * with q and the accumulator in tiles; one subgroup a workgroup; q in its own tile; K and V trading two
 * tiles so no matrix load repeats an address from one key tile to the next; both; unpadded rows
 * (128-byte rows at H=64, the single-operation checks' tight layout); rows padded by 64 bytes; q and
 * the accumulator both in tiles, so no matrix outlives a phase; and last, rows padded by 16 (or 0)
 * bytes with every workgroup variable a multiple of 16 bytes, so no tile starts off a 16-byte
 * boundary (sgmat-source.ts: sgmatWords says what the H100's trace showed).
 */
export type SgmatLayout = Pick<
  MatrixShape,
  | 'pad'
  | 'qTile'
  | 'pingPong'
  | 'oTile'
  | 'subgroups'
  | 'mulFirst'
  | 'flatPrologue'
  | 'fence'
  | 'kTransposed'
  | 'noShuffle'
  | 'alignedTiles'
>;
const ALL_CHANGES = {
  mulFirst: true,
  flatPrologue: true,
  fence: true,
  kTransposed: true,
  noShuffle: true,
} as const;
export const SGMAT_LAYOUTS: readonly SgmatLayout[] = [
  { pad: 16 },
  { pad: 16, mulFirst: true },
  { pad: 16, flatPrologue: true },
  { pad: 16, fence: true },
  { pad: 16, kTransposed: true },
  { pad: 16, noShuffle: true },
  { pad: 16, ...ALL_CHANGES },
  { pad: 16, qTile: true, oTile: true, subgroups: 2, ...ALL_CHANGES },
  // One subgroup a workgroup (16 query rows): no other subgroup's stores to race with its loads.
  { pad: 16, subgroups: 1 },
  { pad: 16, qTile: true },
  { pad: 16, pingPong: true },
  // Two subgroups (32 query rows) a workgroup: with both tiles 4 would not fit 48 KiB at H=128.
  { pad: 16, qTile: true, pingPong: true, subgroups: 2 },
  { pad: 0 },
  { pad: 0, qTile: true, pingPong: true },
  { pad: 64 },
  // No matrix lives across the key loop or a barrier: q and the accumulator in tiles (2 subgroups
  // at H=128 to fit 48 KiB).
  { pad: 16, qTile: true, oTile: true, subgroups: 2 },
  // Every workgroup variable a multiple of 16 bytes and the tiles declared last: on the H100 the
  // other layouts' tiles began 8 or 12 bytes past a 16-byte boundary, and the traced matrix loads
  // and stores landed 4 or 6 f16 (one f32) away from where scalar code put the values.
  { pad: 16, alignedTiles: true },
  { pad: 0, alignedTiles: true },
];

/** The first layout of SGMAT_LAYOUTS whose kernel passes the check, or why none does. */
export async function chooseSgmatLayout(
  device: GPUDevice,
  shape: MatrixShape,
  storageBytes: number,
): Promise<{ layout: SgmatLayout } | { reason: string }> {
  const reasons: string[] = [];
  for (const layout of SGMAT_LAYOUTS) {
    const reason = await checkSgmat(device, { ...shape, ...layout }, storageBytes);
    if (reason === null) return { layout };
    reasons.push(`${layoutName(layout)}: ${reason}`);
  }
  return { reason: reasons.join('; ') };
}

/** A layout in words, for reasons and results. */
export function layoutName(layout: SgmatLayout): string {
  return [
    `rows padded by ${layout.pad ?? 16} bytes`,
    layout.qTile ? 'q in a tile' : '',
    layout.pingPong ? 'K/V ping-pong' : '',
    layout.oTile ? 'O in a tile' : '',
    layout.subgroups ? `${layout.subgroups} subgroups` : '',
    layout.mulFirst ? 'first product plain' : '',
    layout.flatPrologue ? 'flat prologue' : '',
    layout.fence ? 'fenced loads' : '',
    layout.kTransposed ? 'K transposed' : '',
    layout.noShuffle ? 'no shuffles' : '',
    layout.alignedTiles ? 'tiles 16-byte aligned' : '',
  ]
    .filter(Boolean)
    .join(', ');
}
