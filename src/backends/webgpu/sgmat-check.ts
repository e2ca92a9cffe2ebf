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
import { type MatrixShape, type SgmatProbe, sgmatKeys, sgmatSource, sgmatSubgroups } from './sgmat-source.js';
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
 * What a probe of the kernel (sgmat-source.ts) holds on the check's problem: workgroup 0's `rows`
 * query rows against the first tile's `bc` keys — the raw scores q·kᵀ (exact in f32: multiples of
 * 1/256 below 2^8), the weights e^(s·scale − the tile's row max) as f16, or the accumulator Σ p·v.
 */
export function probeExpectation(probe: SgmatProbe, rows: number, bc: number): Float64Array {
  const { q, k, v, scale } = checkInputs();
  const s = new Float64Array(rows * bc);
  for (let i = 0; i < rows; i++)
    for (let j = 0; j < bc; j++) {
      let x = 0;
      for (let h = 0; h < H; h++) x += q[i * H + h] * k[j * H + h];
      s[i * bc + j] = x;
    }
  if (probe === 'scores') return s;
  const p = new Float64Array(rows * bc);
  for (let i = 0; i < rows; i++) {
    let max = -Infinity;
    for (let j = 0; j < bc; j++) max = Math.max(max, s[i * bc + j] * scale);
    for (let j = 0; j < bc; j++)
      p[i * bc + j] = decodeValue(encodeValue(Math.exp(s[i * bc + j] * scale - max), 'float16'), 'float16');
  }
  if (probe === 'p') return p;
  const acc = new Float64Array(rows * H);
  for (let i = 0; i < rows; i++)
    for (let j = 0; j < bc; j++) for (let d = 0; d < H; d++) acc[i * H + d] += p[i * bc + j] * v[j * H + d];
  return acc;
}

/**
 * The sgmat kernel of `shape` on the check's problem: its output (T×H), or with a probe what the
 * probe copied (rows × bc, or rows × H for the accumulator); a string where it did not run.
 * `rewrite` changes the WGSL before it compiles (the tests run the kernel with its matrix
 * operations emulated in plain WGSL on adapters without them).
 */
export async function runSgmatCheck(
  device: GPUDevice,
  shape: MatrixShape,
  storageBytes: number,
  probe?: SgmatProbe,
  rewrite: (code: string) => string = (code) => code,
): Promise<{ bc: number; rows: number; got: Float64Array } | string> {
  const bc = sgmatKeys(H, H, shape, storageBytes);
  if (bc === null) return `no tile of the sgmat kernel fits at H=${H}`;
  const variant: ForwardVariant = {
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
  const { q, k, v, scale } = checkInputs();
  const rows = variant.rows;
  const probeLength = probe === 'acc' ? rows * H : rows * bc;
  const outLength = probe ? probeLength * 4 : T * H * 2;
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
    probe: device.createBuffer({
      size: Math.max(probeLength * 4, 16),
      usage: usage.STORAGE | usage.COPY_SRC,
    }),
  };
  const read = device.createBuffer({ size: outLength, usage: usage.MAP_READ | usage.COPY_DST });
  const names = [...bindings(variant), ...(probe ? ['probe'] : [])];
  try {
    device.pushErrorScope('validation');
    const module = device.createShaderModule({
      code: rewrite(sgmatSource(variant, probe)),
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
    encoder.copyBufferToBuffer(probe ? buffers.probe : buffers.o, 0, read, 0, outLength);
    device.queue.submit([encoder.finish()]);
    const error = await device.popErrorScope();
    if (error) return `the sgmat kernel did not build: ${error.message.split('\n')[0]}`;
    await read.mapAsync(1);
    const bytes = read.getMappedRange().slice(0);
    read.unmap();
    const got = probe
      ? Float64Array.from(new Float32Array(bytes))
      : Float64Array.from(new Uint16Array(bytes), (x) => decodeValue(x, 'float16'));
    return { bc, rows, got };
  } catch (error) {
    return `the sgmat check failed: ${error instanceof Error ? error.message : String(error)}`;
  } finally {
    for (const buffer of [...Object.values(buffers), read]) buffer.destroy();
  }
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
  const ran = await runSgmatCheck(device, shape, storageBytes, undefined, rewrite);
  if (typeof ran === 'string') return ran;
  const { q, k, v, scale } = checkInputs();
  const want = reference(q, k, v, scale);
  let worst = 0;
  for (let e = 0; e < T * H; e++) {
    const d = Math.abs(ran.got[e] - want[e]);
    if (!(d <= worst)) worst = d;
  }
  return worst <= BOUND
    ? null
    : `the sgmat kernel's output was off by ${worst.toPrecision(3)} (bound ${BOUND}) on a B=1 T=S=${T} H=${H} check`;
}

/**
 * The layouts the device check tries, in order of speed, each avoiding one more thing the
 * single-operation checks never did: rows padded by 16 bytes (no bank conflicts) with q held in
 * variables over the key loop; q in its own tile; K and V trading two tiles so no matrix load
 * repeats an address from one key tile to the next; both; unpadded rows (128-byte rows at H=64, the
 * single-operation checks' tight layout); rows padded by 64 bytes; q and the accumulator both in
 * tiles, so no matrix outlives a phase.
 */
export type SgmatLayout = Pick<MatrixShape, 'pad' | 'qTile' | 'pingPong' | 'oTile' | 'subgroups'>;
export const SGMAT_LAYOUTS: readonly SgmatLayout[] = [
  { pad: 16 },
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
  ]
    .filter(Boolean)
    .join(', ');
}
