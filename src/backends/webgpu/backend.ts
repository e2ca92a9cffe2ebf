/**
 * The `webgpu` attention backend: the WGSL flash forward (forward.ts) on the device initWebgpu()
 * opened. Inputs must be webgpu tensors (`.to('webgpu')`); the output is one too.
 */
import { type AttentionBackend, planned, unsupported } from '../backend.js';
import { runForward } from './forward.js';
import { matrixShape, planForward, subgroupSize } from './plan.js';
import { webgpuState } from './runtime.js';

export const webgpuBackend: AttentionBackend = {
  name: 'webgpu',
  device: 'webgpu',
  layouts: ['paged', 'packed'],
  plan(problem) {
    const state = webgpuState();
    if (!state.ok) return unsupported(state.reason);
    const plan = planForward(
      problem,
      state.info.limits,
      undefined,
      state.info.subgroups,
      true,
      matrixShape(state.info),
      subgroupSize(state.info),
    );
    return plan.ok ? planned(plan) : unsupported(plan.reason);
  },
  run: (_plan, problem) => runForward(problem),
};
