/**
 * The `webgpu` backward backend: attentionBackward / attentionVjp on webgpu tensors. One compute
 * pass runs backward-source.ts's kernels in order (dq, then dkdv, then dbias with a bias): WebGPU
 * orders dispatches of a pass, so dkdv reads the D rows dq wrote. Gradients come in the inputs'
 * dtypes and stay on the device.
 */
import { UnsupportedError } from '../../errors.js';
import { itemSize } from '../../tensor/dtype.js';
import { Tensor } from '../../tensor/tensor.js';
import { planned, unsupported } from '../backend.js';
import type { BackwardBackend } from '../backward-backend.js';
import type { BackwardOutput, BackwardProblem } from '../backward-problem.js';
import { type BackwardVariant, backwardKey, dsScratchBytes, planBackward } from './backward-plan.js';
import { BACKWARD_WG, backwardBindings, dbiasSource, dkdvSource, dqSource } from './backward-source.js';
import { paramsBytes, pipelineFor, uploadConstant } from './forward.js';
import { checkGeneration, createTensorBuffer, USAGE } from './memory.js';
import { webgpuContext, webgpuState } from './runtime.js';

/** Runs the backward with `variant` (the plan's; planned here when not given). */
export function runBackward(p: BackwardProblem, given?: BackwardVariant): BackwardOutput {
  const { device, info } = webgpuContext();
  let variant = given;
  if (!variant) {
    const plan = planBackward(p, info.limits);
    if (!plan.ok) throw new UnsupportedError('webgpu', plan.reason);
    variant = plan.variant;
  }
  const key = backwardKey(variant);
  const { B, T, S, N, K, H, Hv } = p;
  const size = itemSize(p.dtype);
  const dq = createTensorBuffer(B * T * N * H * size);
  const dk = createTensorBuffer(B * S * K * H * size);
  const dv = createTensorBuffer(B * S * K * Hv * size);
  const dbias = p.bias ? createTensorBuffer(p.bias.tensor.size * itemSize(p.bias.tensor.dtype)) : null;
  const temporary: GPUBuffer[] = [];
  const constant = (bytes: ArrayBuffer, usage: number) => {
    const buffer = uploadConstant(device, bytes, usage);
    temporary.push(buffer);
    return buffer;
  };
  const scratch = (bytes: number) => {
    const buffer = device.createBuffer({
      size: Math.max(16, Math.ceil(bytes / 4) * 4),
      usage: USAGE.STORAGE,
    });
    temporary.push(buffer);
    return buffer;
  };
  const resources: Record<string, GPUBuffer> = {
    params: constant(paramsBytes(p, 1), USAGE.UNIFORM),
    q: checkGeneration('query', p.query.webgpuBuffer).handle,
    k: checkGeneration('key', p.key.webgpuBuffer).handle,
    v: checkGeneration('value', p.value.webgpuBuffer).handle,
    o: checkGeneration('output', p.output.webgpuBuffer).handle,
    do: checkGeneration('dOutput', p.dOutput.webgpuBuffer).handle,
    lse: checkGeneration('logSumExp', p.logSumExp.webgpuBuffer).handle,
    dq: dq.handle,
    dk: dk.handle,
    dv: dv.handle,
    d: scratch(B * T * N * 8),
  };
  if (p.bias) {
    resources.bias = checkGeneration('bias', p.bias.tensor.webgpuBuffer).handle;
    resources.ds = scratch(dsScratchBytes(p));
    resources.bias_shape = constant(new Uint32Array(p.bias.tensor.shape).buffer, USAGE.UNIFORM);
    resources.dbias = (dbias as NonNullable<typeof dbias>).handle;
  }
  if (p.mask) resources.mask = checkGeneration('mask', p.mask.tensor.webgpuBuffer).handle;
  if (variant.lengths) {
    const lengths = new Int32Array(2 * B);
    for (let b = 0; b < B; b++) {
      lengths[b] = p.querySeqLengths ? p.querySeqLengths[b] : T;
      lengths[B + b] = p.keyValueSeqLengths ? p.keyValueSeqLengths[b] : S;
    }
    resources.lengths = constant(lengths.buffer, USAGE.STORAGE);
  }
  const encoder = device.createCommandEncoder();
  const pass = encoder.beginComputePass();
  const dispatch = (
    kernel: 'dq' | 'dkdv' | 'dbias',
    source: () => string,
    x: number,
    y: number,
    z: number,
  ) => {
    const pipeline = pipelineFor(`${key}-${kernel}`, source);
    pass.setPipeline(pipeline);
    pass.setBindGroup(
      0,
      device.createBindGroup({
        layout: pipeline.getBindGroupLayout(0),
        entries: backwardBindings(variant, kernel).map((name, binding) => ({
          binding,
          resource: { buffer: resources[name] },
        })),
      }),
    );
    pass.dispatchWorkgroups(x, y, z);
  };
  dispatch('dq', () => dqSource(variant), Math.ceil(T / BACKWARD_WG), N, B);
  dispatch('dkdv', () => dkdvSource(variant), Math.ceil(S / BACKWARD_WG), K, B);
  if (p.bias) {
    const words = Math.ceil((p.bias.tensor.size * (variant.bias === 'float32' ? 1 : 0.5)) / BACKWARD_WG);
    const x = Math.min(words, info.limits.maxComputeWorkgroupsPerDimension);
    dispatch('dbias', () => dbiasSource(variant), x, Math.ceil(words / x), 1);
  }
  pass.end();
  device.queue.submit([encoder.finish()]);
  for (const buffer of temporary) buffer.destroy();
  return {
    dQuery: Tensor.fromWebgpuBuffer(dq, [B, T, N, H], p.dtype),
    dKey: Tensor.fromWebgpuBuffer(dk, [B, S, K, H], p.dtype),
    dValue: Tensor.fromWebgpuBuffer(dv, [B, S, K, Hv], p.dtype),
    dBias:
      p.bias && dbias ? Tensor.fromWebgpuBuffer(dbias, p.bias.tensor.shape, p.bias.tensor.dtype) : undefined,
    variant: key,
  };
}

export const webgpuBackward: BackwardBackend<BackwardVariant> = {
  name: 'webgpu',
  device: 'webgpu',
  plan(problem) {
    const state = webgpuState();
    if (!state.ok) return unsupported(state.reason);
    const plan = planBackward(problem, state.info.limits);
    return plan.ok ? planned(plan.variant) : unsupported(plan.reason);
  },
  run: (variant, problem) => runBackward(problem, variant),
};
