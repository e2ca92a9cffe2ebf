/**
 * A float16 or bfloat16 webgpu tensor widened to float32 on the device (exact: every 16-bit value
 * is a float32 one), for attentionVjp's `float32Output`, which reruns the forward in float32.
 */
import { Tensor } from '../../tensor/tensor.js';
import { pipelineFor, uploadConstant } from './forward.js';
import { checkGeneration, createTensorBuffer, USAGE } from './memory.js';
import { webgpuContext } from './runtime.js';

const WG = 64;

function widenSource(dtype: 'float16' | 'bfloat16'): string {
  const convert =
    dtype === 'float16'
      ? 'let pair = unpack2x16float(IN[w]);'
      : 'let word = IN[w]; let pair = vec2f(bitcast<f32>(word << 16u), bitcast<f32>(word & 0xffff0000u));';
  return `
@group(0) @binding(0) var<uniform> COUNT: vec4u;
@group(0) @binding(1) var<storage, read> IN: array<u32>;
@group(0) @binding(2) var<storage, read_write> OUT: array<f32>;
@compute @workgroup_size(${WG})
fn main(@builtin(global_invocation_id) gid: vec3u, @builtin(num_workgroups) groups: vec3u) {
  let w = gid.y * groups.x * ${WG}u + gid.x;
  if (2u * w >= COUNT.x) { return; }
  ${convert}
  OUT[2u * w] = pair.x;
  if (2u * w + 1u < COUNT.x) { OUT[2u * w + 1u] = pair.y; }
}
`;
}

export function widenWebgpu(t: Tensor): Tensor {
  const dtype = t.dtype;
  if (dtype !== 'float16' && dtype !== 'bfloat16') throw new Error(`unreachable: widen ${dtype}`);
  const { device, info } = webgpuContext();
  const input = checkGeneration('tensor', t.webgpuBuffer);
  const out = createTensorBuffer(t.size * 4);
  if (t.size > 0) {
    const pipeline = pipelineFor(`webgpu-widen-${dtype}`, () => widenSource(dtype));
    const count = uploadConstant(device, new Uint32Array([t.size, 0, 0, 0]).buffer, USAGE.UNIFORM);
    const groups = Math.ceil(Math.ceil(t.size / 2) / WG);
    const x = Math.min(groups, info.limits.maxComputeWorkgroupsPerDimension);
    const encoder = device.createCommandEncoder();
    const pass = encoder.beginComputePass();
    pass.setPipeline(pipeline);
    pass.setBindGroup(
      0,
      device.createBindGroup({
        layout: pipeline.getBindGroupLayout(0),
        entries: [count, input.handle, out.handle].map((buffer, binding) => ({
          binding,
          resource: { buffer },
        })),
      }),
    );
    pass.dispatchWorkgroups(x, Math.ceil(groups / x));
    pass.end();
    device.queue.submit([encoder.finish()]);
    count.destroy();
  }
  return Tensor.fromWebgpuBuffer(out, t.shape, 'float32');
}
