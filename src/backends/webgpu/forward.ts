/**
 * The forward launch: one parameter block from the problem, one bind group, one dispatch of
 * (⌈T/rows⌉, N, B) workgroups (rows: the variant's query rows per workgroup). Pipelines are cached by variant key for the device they were made on.
 * The output stays on the device; reading it is the caller's (await tensor.toHostAsync()).
 */
import { UnsupportedError } from '../../errors.js';
import { itemSize } from '../../tensor/dtype.js';
import { Tensor } from '../../tensor/tensor.js';
import type { AttentionProblem, BackendOutput } from '../problem.js';
import { combineSource } from './combine-source.js';
import { decodeSource } from './decode-source.js';
import { forwardSource } from './forward-source.js';
import { checkGeneration, createTensorBuffer, USAGE } from './memory.js';
import { matrixShape, planForward, queryRows, subgroupSize } from './plan.js';
import { webgpuContext } from './runtime.js';
import { type MatrixShape, sgmatSource } from './sgmat-source.js';
import { tiledSource } from './tiled-source.js';
import { bindings, combineBindings, variantKey } from './variant.js';

const pipelines = new Map<string, { generation: number; pipeline: GPUComputePipeline }>();

export function pipelineFor(key: string, source: () => string): GPUComputePipeline {
  const { device, generation } = webgpuContext();
  const cached = pipelines.get(key);
  if (cached && cached.generation === generation) return cached.pipeline;
  const module = device.createShaderModule({ code: source(), label: key });
  const pipeline = device.createComputePipeline({
    layout: 'auto',
    compute: { module, entryPoint: 'main' },
    label: key,
  });
  pipelines.set(key, { generation, pipeline });
  return pipeline;
}

/** A window bound as the kernel's i32: Infinity (unbounded) becomes a value past any length. */
function bound(x: number): number {
  return Math.min(x, 2 ** 30);
}

/**
 * The Params struct of forward-source.ts: 12 words of sizes and flags, then vec4u bias and mask
 * strides (offsets 48, 64) and the paged cache's block size and table width (offset 80).
 */
export function paramsBytes(p: AttentionProblem, splits: number): ArrayBuffer {
  const buffer = new ArrayBuffer(96);
  const u = new Uint32Array(buffer);
  const i = new Int32Array(buffer);
  const f = new Float32Array(buffer);
  u.set([p.B, p.T, p.S, p.N, p.K, p.alignment === 'bottom_right' ? 1 : 0]);
  i[6] = p.window ? bound(p.window.left) : 0;
  i[7] = p.window ? bound(p.window.right) : 0;
  f[8] = p.scale;
  u[9] = p.causal ? 1 : 0;
  u[10] = p.window ? 1 : 0;
  u[11] = splits;
  u.set(p.bias ? p.bias.strides : [0, 0, 0, 0], 12);
  u.set(p.mask ? p.mask.strides : [0, 0, 0, 0], 16);
  if (p.paged) u.set([p.paged.blockSize, p.paged.maxBlocksPerSeq], 20);
  return buffer;
}

export function uploadConstant(device: GPUDevice, bytes: ArrayBuffer, usage: number): GPUBuffer {
  const buffer = device.createBuffer({ size: Math.max(16, bytes.byteLength), usage, mappedAtCreation: true });
  new Uint8Array(buffer.getMappedRange()).set(new Uint8Array(bytes));
  buffer.unmap();
  return buffer;
}

/** Overrides of the plan's choices, for tests that run each path on small cases. */
export interface ForwardOverrides {
  readonly splits?: number;
  /** False runs the one-lane (plain) kernel where the device has subgroups. */
  readonly subgroups?: boolean;
  /** False runs the row kernel where the tiled one applies. */
  readonly tiled?: boolean;
  /** False runs the tiled kernel where the subgroup-matrix one applies. */
  readonly sgmat?: boolean;
  /** The most keys a tile of the subgroup-matrix kernel (timings). */
  readonly sgmatKeys?: number;
  /** Subgroups a workgroup of the subgroup-matrix kernel (timings). */
  readonly sgmatSubgroups?: number;
  /** False runs the row kernel where the decode one applies. */
  readonly decode?: boolean;
  /** The most invocations a key row of the decode kernel (timings). */
  readonly decodeLanes?: number;
  /** Two keys a group each pass of the decode kernel's key loop (timings). */
  readonly decodePairs?: boolean;
}

function withKeys(
  m: MatrixShape | null,
  keys: number | undefined,
  subgroups: number | undefined,
): MatrixShape | null {
  if (!m) return m;
  return {
    ...m,
    ...(keys !== undefined ? { keys } : {}),
    ...(subgroups !== undefined ? { subgroups } : {}),
  };
}

export function runForward(p: AttentionProblem, overrides: ForwardOverrides = {}): BackendOutput {
  const { device, info } = webgpuContext();
  const plan = planForward(
    p,
    info.limits,
    overrides.splits,
    info.subgroups && (overrides.subgroups ?? true),
    overrides.tiled ?? true,
    overrides.sgmat === false
      ? null
      : withKeys(matrixShape(info), overrides.sgmatKeys, overrides.sgmatSubgroups),
    overrides.decode === false || overrides.subgroups === false ? null : subgroupSize(info),
    overrides.decodeLanes,
    overrides.decodePairs ?? false,
  );
  if (!plan.ok) throw new UnsupportedError('webgpu', plan.reason);
  const { variant } = plan;
  const inputs = {
    q: checkGeneration('query', p.query.webgpuBuffer),
    k: checkGeneration('key', p.key.webgpuBuffer),
    v: checkGeneration('value', p.value.webgpuBuffer),
    bias: p.bias ? checkGeneration('bias', p.bias.tensor.webgpuBuffer) : null,
    mask: p.mask ? checkGeneration('mask', p.mask.tensor.webgpuBuffer) : null,
  };
  const key = variantKey(variant);
  const pipeline = pipelineFor(key, () =>
    variant.kernel === 'decode'
      ? decodeSource(variant)
      : variant.kernel === 'sgmat'
        ? sgmatSource(variant)
        : variant.kernel === 'tiled'
          ? tiledSource(variant)
          : forwardSource(variant),
  );
  const { B, T, N, Hv } = p;
  const rows = queryRows(p);
  const output = createTensorBuffer(rows * N * Hv * itemSize(p.dtype));
  const lse = variant.lse ? createTensorBuffer(rows * N * 4) : null;
  const temporary: GPUBuffer[] = [];
  const scratch = (bytes: number) => {
    const buffer = device.createBuffer({ size: Math.max(16, bytes), usage: USAGE.STORAGE });
    temporary.push(buffer);
    return buffer;
  };
  const resources: Record<string, GPUBuffer> = {
    params: uploadConstant(device, paramsBytes(p, plan.splits), USAGE.UNIFORM),
    q: inputs.q.handle,
    k: inputs.k.handle,
    v: inputs.v.handle,
    o: output.handle,
  };
  temporary.push(resources.params);
  if (lse) resources.lse = lse.handle;
  if (inputs.bias) resources.bias = inputs.bias.handle;
  if (inputs.mask) resources.mask = inputs.mask.handle;
  if (variant.lengths) {
    const lengths = new Int32Array(2 * B);
    for (let b = 0; b < B; b++) {
      lengths[b] = p.querySeqLengths ? p.querySeqLengths[b] : T;
      lengths[B + b] = p.keyValueSeqLengths ? p.keyValueSeqLengths[b] : p.S;
    }
    resources.lengths = uploadConstant(device, lengths.buffer, USAGE.STORAGE);
    temporary.push(resources.lengths);
  }
  if (p.paged) {
    const table = p.paged.blockTable;
    resources.table = uploadConstant(
      device,
      table.buffer.slice(table.byteOffset, table.byteOffset + table.byteLength) as ArrayBuffer,
      USAGE.STORAGE,
    );
    temporary.push(resources.table);
  }
  if (variant.packedQuery || variant.packedKv) {
    const offsets = new Int32Array(2 * (B + 1));
    if (p.packed?.querySeqOffsets) offsets.set(p.packed.querySeqOffsets);
    if (p.packed?.keyValueSeqOffsets) offsets.set(p.packed.keyValueSeqOffsets, B + 1);
    resources.offsets = uploadConstant(device, offsets.buffer, USAGE.STORAGE);
    temporary.push(resources.offsets);
  }
  if (variant.split) {
    const parts = B * T * N * plan.splits;
    resources.part_o = scratch(parts * Hv * 4);
    resources.part_ml = scratch(parts * 2 * 4);
  }
  const group = (pipe: GPUComputePipeline, names: string[]) =>
    device.createBindGroup({
      layout: pipe.getBindGroupLayout(0),
      entries: names.map((name, binding) => ({ binding, resource: { buffer: resources[name] } })),
    });
  const encoder = device.createCommandEncoder();
  const pass = encoder.beginComputePass();
  pass.setPipeline(pipeline);
  pass.setBindGroup(0, group(pipeline, bindings(variant)));
  if (variant.kernel === 'decode') {
    pass.dispatchWorkgroups(Math.ceil((T * (N / p.K)) / variant.rows), p.K, B * plan.splits);
  } else {
    pass.dispatchWorkgroups(Math.ceil(T / variant.rows), N, B * plan.splits);
  }
  if (variant.split) {
    const combine = pipelineFor(`${key}-combine`, () => combineSource(variant));
    const workgroups = B * T * N;
    const x = Math.min(workgroups, info.limits.maxComputeWorkgroupsPerDimension);
    pass.setPipeline(combine);
    pass.setBindGroup(0, group(combine, combineBindings(variant)));
    pass.dispatchWorkgroups(x, Math.ceil(workgroups / x));
  }
  pass.end();
  device.queue.submit([encoder.finish()]);
  // Destroying after submit is allowed: the queued dispatches keep what they use.
  for (const buffer of temporary) buffer.destroy();
  return {
    // A packed query's output is packed like it: (totalT, N, Hv) and (totalT, N).
    output: Tensor.fromWebgpuBuffer(output, variant.packedQuery ? [rows, N, Hv] : [B, T, N, Hv], p.dtype),
    logSumExp: lse
      ? Tensor.fromWebgpuBuffer(lse, variant.packedQuery ? [rows, N] : [B, T, N], 'float32')
      : undefined,
    variant: key,
  };
}
