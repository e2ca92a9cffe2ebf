/**
 * Implementation 'flash' on CUDA: attnlab's own kernels, one launch per call, compiled by NVRTC per
 * variant and cached. On sm_90a, when the Hopper kernel is on (hopper-variant.ts), the cases
 * hopperVariant() accepts run on the wgmma + TMA kernel (src/kernels/hopper/hopper_fwd.cu, variant
 * keys ending in `.wgmma`); every other case, and every other GPU, on the FlashAttention-2 class
 * mma.sync kernel (src/kernels/flash/flash_fwd.cu).
 */

import { UnsupportedError } from '../../../errors.js';
import { itemSize } from '../../../tensor/dtype.js';
import { Tensor } from '../../../tensor/tensor.js';
import {
  type AttentionBackend,
  type Planned,
  planned,
  SUPPORTED,
  type Support,
  unsupported,
} from '../../backend.js';
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
import { type FlashPlan, fillPlan, flashKernel, flashPlan, keptFlashPlan } from './plan.js';
import {
  FLASH_BIAS_CODES,
  type FlashVariant,
  flashVariant,
  flashVariantKey,
  flashVariantSharedBytes,
} from './sm80/variant.js';
import { launchHopper, zeroedWorkCounter } from './sm90/hopper.js';
import { type HopperVariant, hopperVariant, hopperVariantKey } from './sm90/hopper-variant.js';

/** Row and key indices are int32 in the kernel, and i + diag ± window must not overflow. */
const MAX_LENGTH = 1 << 28;

/** Why the kernel cannot run `p`, or SUPPORTED. Needs the GPU's compute capability. */
export function flashSupport(p: AttentionProblem): Support {
  const checked = flashChecks(p);
  return checked.ok ? SUPPORTED : checked;
}

/** flashSupport's checks, answering with the mma.sync variant they built for the shared-memory check. */
function flashChecks(p: AttentionProblem): Planned<FlashVariant> {
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
  const misaligned = misalignedInput(p);
  return misaligned ?? planned(variant);
}

/** Q, K and V's 16-byte alignment on the device (the kernels copy 16-byte chunks), checked on every call. */
function misalignedInput(p: AttentionProblem): (Support & { readonly ok: false }) | null {
  // The common case without the list firstMisaligned takes: one bigint remainder per tensor, no arrays.
  if (p.query.buffer.ptr % 16n === 0n && p.key.buffer.ptr % 16n === 0n && p.value.buffer.ptr % 16n === 0n)
    return null;
  const misaligned = firstMisaligned([
    ['query', p.query],
    ['key', p.key],
    ['value', p.value],
  ]);
  return misaligned
    ? unsupported(`${misaligned} is not 16-byte aligned on the device (the kernel copies 16-byte chunks)`)
    : null;
}

export { flashKernel, flashModule } from './plan.js';

/**
 * How the flash backend runs a problem: the decode kernels (decode/decode.ts chooses among them), or
 * one dense launch — of the per-shape plan kept in plan.ts (plain problems: no bias, no mask), or of
 * the Hopper or mma.sync variant built for this call. `family` is the kernel family that runs, which
 * the registry's measured dispatch compares with the family a recorded table measured.
 */
export type FlashBackendPlan =
  | { readonly family: 'decode' }
  | {
      readonly family: 'wgmma' | 'mma' | 'fma';
      /** The variant key results report. */
      readonly key: string;
      readonly kept: FlashPlan | null;
      readonly hopper: HopperVariant | null;
      readonly mma: FlashVariant | null;
    };

const DECODE_PLAN: Planned<FlashBackendPlan> = planned({ family: 'decode' });

/** Whether and how the flash backend runs `p`: every check once, the variant built once. */
export function planFlash(p: AttentionProblem): Planned<FlashBackendPlan> {
  // A plain dense problem whose shape ran before: its kept plan stands for every check that depends
  // on the shape alone (plan.ts keys it by all of them and the device); Q, K and V's alignment is per call.
  if (!p.paged && !p.packed && !hasVariants(p) && !wantsDecodeKernel(p)) {
    const kept = keptFlashPlan(p);
    if (kept) {
      const misaligned = misalignedInput(p);
      if (misaligned) return misaligned;
      return planned({ family: kept.family, key: kept.key, kept, hopper: kept.hopper, mma: kept.mma });
    }
  }
  const checked = flashChecks(p);
  if (!checked.ok) return checked;
  // Paged and packed problems need the decode kernel; dense ones may take it (decode.ts says when).
  if (p.paged || p.packed) {
    const decode = decodeSupport(p);
    return decode.ok ? DECODE_PLAN : decode;
  }
  // The decode kernels take no modifiers: those run on the prefill kernel at every length.
  if (!hasVariants(p) && wantsDecodeKernel(p) && decodeSupport(p).ok) return DECODE_PLAN;
  return planned(densePlan(p, checked.plan));
}

type DensePlan = Exclude<FlashBackendPlan, { readonly family: 'decode' }>;

/** The family of `p`'s dense launch, from its shape: the Hopper kernel where hopperVariant() takes it. */
function denseFamily(p: AttentionProblem): 'wgmma' | 'mma' | 'fma' {
  const kept = keptFlashPlan(p);
  if (kept) return kept.family;
  if ('variant' in hopperVariant(p, targetArch())) return 'wgmma';
  return p.dtype === 'float32' ? 'fma' : 'mma';
}

/** The dense launch of `p`: the Hopper kernel where hopperVariant() takes the case, else `mma`. */
function densePlan(p: AttentionProblem, mma: FlashVariant): DensePlan {
  // Modifiers and block masks run on both kernels (src/kernels/common/modifiers.cuh): hopperVariant
  // takes them (or says why not) as it takes every other option.
  const found = hopperVariant(p, targetArch());
  if ('variant' in found) {
    const v = found.variant;
    return { family: 'wgmma', key: hopperVariantKey(v), kept: null, hopper: v, mma: null };
  }
  return { family: mma.kernel, key: flashVariantKey(mma), kept: null, hopper: null, mma };
}

/** Runs the dense kernel on `p` (inputs on the GPU); the output and log-sum-exp are new device tensors. */
export function runFlash(p: AttentionProblem): BackendOutput {
  const checked = flashChecks(p);
  if (!checked.ok) throw new UnsupportedError('flash (cuda)', checked.reason);
  return runDense(densePlan(p, checked.plan), p);
}

/** One dense launch of `dense` on `p`. */
function runDense(dense: DensePlan, p: AttentionProblem): BackendOutput {
  const { B, T, N, Hv } = p;
  // A plain problem's variant, kernel and packed parameters are made once per shape (plan.ts).
  const plan = dense.kept ?? flashPlan(p);
  const key = dense.key;
  const out = allocDevice(B * T * N * Hv * itemSize(p.dtype));
  const lse = p.returnLogSumExp ? allocDevice(B * T * N * 4) : null;
  const qLens = lengthsOnDevice(p.querySeqLengths);
  const kvLens = lengthsOnDevice(p.keyValueSeqLengths);
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
      } else if (dense.hopper) launchHopper(p, dense.hopper, pointers);
      else launchMma(p, dense.mma!, pointers);
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

/** A call's lengths on the device, or null. A function of the module: a closure made each call costs a defineProperty of its name under tsx. */
function lengthsOnDevice(values: Int32Array | null) {
  return values ? copyInt32ToDevice(values) : null;
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

export const cudaFlashBackend: AttentionBackend<FlashBackendPlan> = {
  name: 'flash',
  device: 'cuda',
  layouts: ['paged', 'packed', 'modifiers'],
  plan: planFlash,
  run: (plan, p) => (plan.family === 'decode' ? runDecode(p) : runDense(plan, p)),
  family: denseFamily,
};
