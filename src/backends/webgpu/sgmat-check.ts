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
import { type MatrixShape, sgmatKeys, sgmatSource, sgmatSubgroups } from './sgmat-source.js';
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

/**
 * Null where the sgmat kernel of `shape` matches the float64 result on this device, else why not
 * (the largest error, or the error Dawn reported).
 */
export async function checkSgmat(
  device: GPUDevice,
  shape: MatrixShape,
  storageBytes: number,
): Promise<string | null> {
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
  const [q, k, v] = [1, 2, 3].map((seed) => values(T * H, seed));
  const scale = 1 / Math.sqrt(H);
  const want = reference(q, k, v, scale);
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
  };
  const read = device.createBuffer({ size: T * H * 2, usage: usage.MAP_READ | usage.COPY_DST });
  try {
    device.pushErrorScope('validation');
    const module = device.createShaderModule({ code: sgmatSource(variant), label: 'sgmat check' });
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
        entries: bindings(variant).map((name, binding) => ({ binding, resource: { buffer: buffers[name] } })),
      }),
    );
    pass.dispatchWorkgroups(Math.ceil(T / variant.rows), 1, 1);
    pass.end();
    encoder.copyBufferToBuffer(buffers.o, 0, read, 0, T * H * 2);
    device.queue.submit([encoder.finish()]);
    const error = await device.popErrorScope();
    if (error) return `the sgmat kernel did not build: ${error.message.split('\n')[0]}`;
    await read.mapAsync(1);
    const got = new Uint16Array(read.getMappedRange().slice(0));
    read.unmap();
    let worst = 0;
    for (let e = 0; e < T * H; e++) {
      const d = Math.abs(decodeValue(got[e], 'float16') - want[e]);
      if (!(d <= worst)) worst = d;
    }
    return worst <= BOUND
      ? null
      : `the sgmat kernel's output was off by ${worst.toPrecision(3)} (bound ${BOUND}) on a B=1 T=S=${T} H=${H} check`;
  } catch (error) {
    return `the sgmat check failed: ${error instanceof Error ? error.message : String(error)}`;
  } finally {
    for (const buffer of [...Object.values(buffers), read]) buffer.destroy();
  }
}
