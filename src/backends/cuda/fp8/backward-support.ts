/**
 * Whether cuDNN's FP8 SDPA backward graph can differentiate a problem: the forward's rules
 * (support.ts: sm_90+, bfloat16, H a multiple of 16 ≤ 256 with Hv = H, no bias, mask or window,
 * causal top-left, padding through lengths) plus cudnn-frontend's for the FP8 backward
 * (SDPAFP8BackwardNode's checks): on Hopper H = Hv = 128 exactly (Blackwell: ≤ 128, a multiple of
 * 16), cuDNN 9.1.0 or newer and not 9.10.0 (a known bug), and per-tensor delayed scaling.
 */
import { SUPPORTED, type Support, unsupported } from '../../backend.js';
import type { AttentionProblem } from '../../problem.js';
import { type ComputeCapability, fp8Support } from './support.js';

/**
 * FP8 backward support of `p` on a GPU of compute capability `cc` with cuDNN `version` (null when
 * unknown: 'emulated' applies Hopper's rules, as the CPU emulation stands in for an H100/H200).
 */
export function fp8BackwardSupport(
  p: AttentionProblem,
  cc: ComputeCapability | null | 'emulated',
  scaling: 'delayed' | 'current',
  version: number | null,
): Support {
  const forward = fp8Support(p, cc);
  if (!forward.ok) return forward;
  if (scaling === 'current') {
    return unsupported(
      'the FP8 backward takes DelayedScaling: Float8CurrentScaling would need the amax of dQ, dK, dV and dP ' +
        'before the graph that computes them (TE runs current-scaling FP8 attention on Blackwell only)',
    );
  }
  const hopper = cc === 'emulated' || cc?.major === 9;
  if (hopper && p.H !== 128) {
    return unsupported(`cuDNN's FP8 attention backward on Hopper needs H = Hv = 128; got H=${p.H}`);
  }
  if (!hopper && p.H > 128) {
    return unsupported(`cuDNN's FP8 attention backward needs H ≤ 128 on this GPU; got H=${p.H}`);
  }
  if (version !== null && version < 90100) {
    return unsupported(`cuDNN's FP8 attention backward needs cuDNN 9.1.0 or newer; this is ${version}`);
  }
  if (version === 91000) {
    return unsupported("cuDNN 9.10.0's FP8 attention backward has known bugs (cudnn-frontend refuses it)");
  }
  return SUPPORTED;
}
