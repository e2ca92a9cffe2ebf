/**
 * Whether cuDNN's FP8 SDPA graph can run a problem on a given GPU (the FP8 backend's `supports`).
 *
 * The limits are cudnn-frontend's for FP8 forward on Hopper (sdpa_support_surface.h) and what was
 * verified from Node.js on the H200 (cudnn-sdpa-verified.md §7): sm_90+, head dim a multiple of 16
 * and ≤ 256 with Hv = H, no bias, causal top-left, padding through sequence lengths.
 */
import { SUPPORTED, type Support, unsupported } from '../../backend.js';
import type { AttentionProblem } from '../../problem.js';

export interface ComputeCapability {
  readonly major: number;
  readonly minor: number;
}

/**
 * FP8 support of `p` on a GPU of compute capability `cc` (null: no GPU at all). 'emulated' checks
 * the graph's limits only: the CPU emulation refuses what the GPU path would, so that a case tried
 * on the CPU does not turn into an error on the GPU.
 */
export function fp8Support(p: AttentionProblem, cc: ComputeCapability | null | 'emulated'): Support {
  if (p.modifiers || p.blockMask) {
    return unsupported('score/mask modifiers (scoreMod, maskMod, blockMask): the FP8 graph takes none');
  }
  if (cc === null) return unsupported('no CUDA device is available');
  if (cc !== 'emulated' && cc.major < 9) {
    return unsupported(
      `FP8 attention needs compute capability 9.0 (Hopper) or newer; this GPU is sm_${cc.major}${cc.minor}`,
    );
  }
  if (p.dtype !== 'bfloat16') {
    return unsupported(`the FP8 path quantises bfloat16 inputs and returns bfloat16; got ${p.dtype}`);
  }
  if (p.H % 16 !== 0 || p.H > 256) {
    return unsupported(
      `cuDNN FP8 attention needs a head dim that is a multiple of 16 and at most 256; got H=${p.H}`,
    );
  }
  if (p.Hv !== p.H) return unsupported(`the FP8 graph needs Hv = H; got H=${p.H}, Hv=${p.Hv}`);
  if (p.bias) return unsupported("cuDNN's FP8 SDPA graph takes no bias (attnBiasType must be 'no_bias')");
  if (p.mask)
    return unsupported('the FP8 graph takes no element mask (legacy TE mask); pass sequence lengths instead');
  if (p.window)
    return unsupported('the FP8 graph has no sliding window (windowSize must be unset or [-1, -1])');
  const padded = p.querySeqLengths !== null || p.keyValueSeqLengths !== null;
  // With T = S and no padding the two diagonals coincide, so bottom-right is the top-left graph.
  if (p.causal && p.alignment === 'bottom_right' && (p.T !== p.S || padded)) {
    return unsupported('bottom-right causal masking is not supported by cuDNN FP8 attention on Hopper');
  }
  return SUPPORTED;
}
