/**
 * Implementation 'flash' on CUDA: attnlab's own kernels, one launch per call, compiled by NVRTC per
 * variant and cached. On sm_90a, when the Hopper kernel is on (hopper-variant.ts), the cases
 * hopperVariant() accepts run on the wgmma + TMA kernel (src/kernels/hopper/hopper_fwd.cu, variant
 * keys ending in `.wgmma`); every other case, and every other GPU, on the FlashAttention-2 class
 * mma.sync kernel (src/kernels/flash/flash_fwd.cu).
 */

import { itemSize } from '../../../tensor/dtype.js';
import { Tensor } from '../../../tensor/tensor.js';
import { type AttentionBackend, SUPPORTED, type Support, unsupported } from '../../backend.js';
import type { AttentionProblem, BackendOutput } from '../../problem.js';
import { cudaAvailable, getCudaContext, targetArch } from '../runtime/context.js';
import { launchKernel } from '../runtime/launch.js';
import { allocDevice, copyInt32ToDevice, firstMisaligned } from '../runtime/memory.js';
import { decodeSupport, runDecode, wantsDecodeKernel } from './decode/decode.js';
import {
  blockMaskOf,
  hasVariants,
  marshalBlockMask,
  marshalCaptures,
  modifiersOf,
  variantsRule,
} from './modifiers.js';
import { buildFlashParams, type FlashPointers, marshalFlashParams } from './params.js';
import { fillPlan, flashKernel, flashPlan } from './plan.js';
import {
  FLASH_BIAS_CODES,
  type FlashVariant,
  flashVariant,
  flashVariantKey,
  flashVariantSharedBytes,
} from './sm80/variant.js';
import { launchHopper, zeroedWorkCounter } from './sm90/hopper.js';
import { hopperVariant, hopperVariantKey } from './sm90/hopper-variant.js';

/** Row and key indices are int32 in the kernel, and i + diag ± window must not overflow. */
const MAX_LENGTH = 1 << 28;

/** Why the kernel cannot run `p`, or SUPPORTED. Needs the GPU's compute capability. */
export function flashSupport(p: AttentionProblem): Support {
  if (p.dtype !== 'bfloat16' && p.dtype !== 'float16' && p.dtype !== 'float32') {
    return unsupported(
      `dtype ${p.dtype}: the kernels take bfloat16/float16 (tensor cores) or float32 (float32 FMAs)`,
    );
  }
  if (p.H % 8 !== 0 || p.Hv % 8 !== 0 || Math.max(p.H, p.Hv) > 256) {
    return unsupported(
      `head dims H=${p.H}, Hv=${p.Hv}: the kernel needs multiples of 8 (16-byte rows) of at most 256`,
    );
  }
  if (p.bias && !(p.bias.tensor.dtype in FLASH_BIAS_CODES)) {
    return unsupported(
      `bias dtype ${p.bias.tensor.dtype}: the kernel reads float32, bfloat16 or float16 bias`,
    );
  }
  if (p.T >= MAX_LENGTH || p.S >= MAX_LENGTH) {
    return unsupported(`T=${p.T}, S=${p.S}: the kernel indexes rows with int32 and needs T, S < 2^28`);
  }
  if (hasVariants(p)) {
    if (p.dtype === 'float32') {
      return unsupported(
        'score/mask modifiers and block masks in float32: the float32 kernel does not take them (bfloat16/float16 do)',
      );
    }
    if (p.paged || p.packed) {
      return unsupported(
        'score/mask modifiers and block masks with a paged or packed layout: dense inputs only',
      );
    }
    const rule = variantsRule(p);
    if (rule) return unsupported(rule);
  }
  const cuda = cudaAvailable();
  if (!cuda.ok) return unsupported(`no CUDA device: ${cuda.reason}`);
  const { properties } = getCudaContext();
  if (properties.computeCapability.major < 8) {
    const { major, minor } = properties.computeCapability;
    return unsupported(
      `compute capability ${major}.${minor}: mma.sync bf16 and cp.async need sm_80 or newer`,
    );
  }
  const variant = flashVariant(p, targetArch(properties));
  const shared = flashVariantSharedBytes(variant);
  if (shared > properties.maxSharedMemoryPerBlockOptin) {
    return unsupported(
      `tiles ${flashVariantKey(variant)} need ${shared} B of shared memory, the GPU allows ` +
        `${properties.maxSharedMemoryPerBlockOptin} B per block`,
    );
  }
  if (p.B * p.N > 65535) {
    return unsupported(
      `B·N = ${p.B * p.N}: the grid's y dimension (one per batch and head) is at most 65535`,
    );
  }
  const misaligned = firstMisaligned([
    ['query', p.query],
    ['key', p.key],
    ['value', p.value],
  ]);
  if (misaligned) {
    return unsupported(
      `${misaligned} is not 16-byte aligned on the device (the kernel copies 16-byte chunks)`,
    );
  }
  return SUPPORTED;
}

export { flashKernel, flashModule } from './plan.js';

/** Runs the kernel on `p` (inputs on the GPU); the output and log-sum-exp are new device tensors. */
export function runFlash(p: AttentionProblem): BackendOutput {
  const { B, T, N, Hv } = p;
  // A plain problem's variant, kernel and packed parameters are made once per shape (plan.ts).
  const plan = flashPlan(p);
  const arch = plan ? '' : targetArch();
  // Modifiers and block masks run on both kernels (src/kernels/common/modifiers.cuh).
  const hopper = plan ? { reason: 'planned' } : hopperVariant(p, arch);
  const variant = plan || 'variant' in hopper ? null : flashVariant(p, arch);
  const key = plan
    ? plan.key
    : 'variant' in hopper
      ? hopperVariantKey(hopper.variant)
      : flashVariantKey(variant!);
  const out = allocDevice(B * T * N * Hv * itemSize(p.dtype));
  const lse = p.returnLogSumExp ? allocDevice(B * T * N * 4) : null;
  const lengths = (values: Int32Array | null) => (values ? copyInt32ToDevice(values) : null);
  const qLens = lengths(p.querySeqLengths);
  const kvLens = lengths(p.keyValueSeqLengths);
  try {
    if (B * N * T > 0) {
      const pointers: FlashPointers = {
        q: p.query.buffer.ptr,
        k: p.key.buffer.ptr,
        v: p.value.buffer.ptr,
        o: out.ptr,
        lse: lse?.ptr ?? 0n,
        bias: p.bias?.tensor.buffer.ptr ?? 0n,
        mask: p.mask?.tensor.buffer.ptr ?? 0n,
        qLens: qLens?.ptr ?? 0n,
        kvLens: kvLens?.ptr ?? 0n,
      };
      if (plan) {
        fillPlan(plan, p, pointers, plan.counterAt >= 0 ? zeroedWorkCounter() : 0n);
        launchKernel(plan.fn, plan.launch, [{ type: 'bytes', bytes: plan.bytes }]);
      } else if ('variant' in hopper) launchHopper(p, hopper.variant, pointers);
      else launchMma(p, variant!, pointers);
    }
  } finally {
    // Safe before the kernel ran: the pool hands these blocks only to work enqueued later on the
    // same stream.
    qLens?.release();
    kvLens?.release();
  }
  return {
    output: Tensor.fromDeviceBuffer(out, [B, T, N, Hv], p.dtype),
    logSumExp: lse ? Tensor.fromDeviceBuffer(lse, [B, T, N], 'float32') : undefined,
    variant: key,
  };
}

/** The mma.sync kernel (flash_fwd.cu / flash_fwd_f32.cu) on `p`. */
function launchMma(p: AttentionProblem, variant: FlashVariant, pointers: FlashPointers): void {
  const { blockM, warps } = variant.tiles;
  launchKernel(
    flashKernel(variant),
    {
      // x: query blocks (the kernel visits them last-first), y: batch × head; see schedule.cuh.
      grid: [Math.ceil(p.T / blockM), p.B * p.N, 1],
      block: [warps * 32, 1, 1],
      sharedBytes: flashVariantSharedBytes(variant),
    },
    hasVariants(p)
      ? [
          marshalFlashParams(buildFlashParams(p, pointers)),
          marshalCaptures(modifiersOf(p)),
          marshalBlockMask(blockMaskOf(p), p.T, p.S),
        ]
      : [marshalFlashParams(buildFlashParams(p, pointers))],
  );
}

/** Paged and packed problems need the decode kernel; dense ones may take it (decode.ts says when). */
function supportsFlash(p: AttentionProblem): Support {
  const general = flashSupport(p);
  if (!general.ok || (!p.paged && !p.packed)) return general;
  return decodeSupport(p);
}

export const cudaFlashBackend: AttentionBackend = {
  name: 'flash',
  device: 'cuda',
  layouts: ['paged', 'packed', 'modifiers'],
  supports: supportsFlash,
  // The decode kernels take no modifiers: those run on the prefill kernel at every length.
  run: (p) => (!hasVariants(p) && wantsDecodeKernel(p) && decodeSupport(p).ok ? runDecode(p) : runFlash(p)),
};
