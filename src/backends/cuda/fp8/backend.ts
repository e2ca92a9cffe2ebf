/**
 * The cuDNN FP8 backend of the FP8 step: quantise on the device, cuDNN's FP8 SDPA graph, and the
 * delayed-scaling state updated on the device (run.ts), on GPUs fp8Support accepts.
 */
import { NO_PLAN } from '../../backend.js';
import type { Fp8Backend } from '../../fp8-backend.js';
import { cudaAvailable, getCudaContext } from '../runtime/context.js';
import { runCudaFp8 } from './run.js';
import { DeviceDelayedState } from './state.js';
import { fp8Support } from './support.js';

export const cudnnFp8Backend: Fp8Backend<null> = {
  name: 'cudnn-fp8',
  device: 'cuda',
  plan(p) {
    const support = fp8Support(p, cudaAvailable().ok ? getCudaContext().properties.computeCapability : null);
    return support.ok ? NO_PLAN : support;
  },
  run(_plan, p) {
    const { dtype8, keepFp8Output } = p;
    if (p.scaling.kind === 'current') {
      const result = runCudaFp8({
        problem: p,
        dtype8,
        scaling: { kind: 'current' },
        keepFp8Output,
        keepResiduals: p.keepResiduals,
      });
      p.state.countStep();
      return result;
    }
    // The histories and scales live on the device between steps; the host copy catches up when read.
    const state = p.scaling.deviceMirror(DeviceDelayedState.upload);
    const { margin, mostRecent } = p.scaling;
    const result = runCudaFp8({
      problem: p,
      dtype8,
      scaling: { kind: 'delayed', state, margin, mostRecent },
      keepFp8Output,
      keepResiduals: p.keepResiduals,
    });
    p.state.deviceStepEnqueued();
    return result;
  },
};
