/**
 * The 'flash' backward on CUDA: attnlab's fused FlashAttention-2 class backward
 * (src/kernels/flash/flash_bwd.cu), O(T) memory — no (B,N,T,S) buffer, only per-row statistics
 * (2 floats per (b, n, t)) and, unless deterministic, a float32 dQ accumulator: (B,T,N,H), or
 * (B·N, 2, t_pad, D/2) for the Hopper module (flashBackwardDqWorkspaceBytes).
 *
 *   1. prep       D = rowsum(dO∘O), base-2 log-sum-exp, dQ accumulator zeroed   one warp per row
 *                 (O is the 16-bit output, or the float32 one when the caller passes it: float32Output)
 *   2. dkdv       dK, dV per 128-key block (GQA: summed over the group in registers), and
 *                 dQ += dS·K into the accumulator with float32 reductions        grid (S/128, B·K)
 *   3. dq_convert dQ = scale·accumulator in the input dtype
 * With `deterministic: true`, 2 runs without dQ (dkdv_only) and 3 is the dQ pass (dq: one block
 * per 128 query rows, dQ in registers): no atomics, bitwise reproducible, one more recompute of P.
 * The Hopper module instead keeps its launches and adds dQ in a fixed order of key blocks, a
 * semaphore per (b·N + n, query block) in the workspace (hopper/bwd_dq_order.cuh), except with a
 * block mask (orderedDqAdds).
 *
 * Takes bf16/fp16 with causal (both alignments), windows, padding lengths, GQA/MQA, H, Hv ≤ 128;
 * backward-variant.ts says why not otherwise, and `auto` then goes on to naive.
 *
 * On sm_90a at the padded head dims of HOPPER_BACKWARD_DEFAULTS (64, 96, 128; ATTNLAB_FLASH_BWD_KERNEL
 * names another loop), the Hopper module runs instead (hopper/hopper_bwd.cu: wgmma, two computing
 * warpgroups of 64 keys, at 64 beside a producer warpgroup; dQ added a warp's 16 rows at a time by
 * bulk reduce-adds into a (B·N, 2, t_pad, D/2) workspace); the same launches and parameters, 384
 * threads for the producer loop.
 *
 * NaN and Inf: non-finite Q, K and dO elements are zeroed in shared memory after their loads, so that
 * none meets a zero weight inside a tensor-core product (0·NaN); the NaN log-sum-exp of every row that
 * sees a non-finite Q or K element, and the non-finite D = rowsum(dO∘O) of a row whose dO holds one,
 * still carry them to exactly the reference's dQ, dK and dV, and a query block whose dO held one adds
 * those elements back into dV for the keys whose weight for that row is not 0 (bwd_common.cuh).
 * Exact for NaN; an infinite dO element gives a non-finite dS where the reference's is (its dP·0
 * terms can differ between NaN and ±Inf).
 */
import { itemSize } from '../../../../tensor/dtype.js';
import type { DeviceBuffer } from '../../../../tensor/storage.js';
import { Tensor } from '../../../../tensor/tensor.js';
import { type Planned, planned, unsupported } from '../../../backend.js';
import type { BackwardBackend } from '../../../backward-backend.js';
import type { BackwardOutput, BackwardProblem } from '../../../backward-problem.js';
import { type CompiledModule, loadKernels } from '../../runtime/compile.js';
import { cudaAvailable, getCudaContext, targetArch } from '../../runtime/context.js';
import { launchKernel } from '../../runtime/launch.js';
import { allocDevice, copyInt32ToDevice, fillDevice32, firstMisaligned } from '../../runtime/memory.js';
import {
  blockMaskOf,
  hasVariants,
  kernelPrelude,
  marshalBlockMask,
  marshalCaptures,
  modifiersOf,
} from '../modifiers.js';
import { buildFlashParams, marshalFlashParams } from '../params.js';
import { marshalFlashBwdParams } from './backward-params.js';
import {
  FLASH_BACKWARD_DQ_TILES,
  FLASH_BACKWARD_MAX_HEAD_DIM,
  FLASH_BACKWARD_ROW_PAD,
  type FlashBackwardVariant,
  flashBackwardDefines,
  flashBackwardDqWorkspaceBytes,
  flashBackwardFile,
  flashBackwardRule,
  flashBackwardSharedBytes,
  flashBackwardVariant,
  flashBackwardVariantKey,
  orderedDqAdds,
} from './backward-variant.js';

export const FLASH_BACKWARD_KERNELS = [
  'attnlab_flash_bwd_prep',
  'attnlab_flash_bwd_dkdv',
  'attnlab_flash_bwd_dkdv_only',
  'attnlab_flash_bwd_dq',
  'attnlab_flash_bwd_dq_convert',
  'attnlab_flash_bwd_dbias_convert',
] as const;

/**
 * The module of `variant` (all five kernels, one NVRTC compile, cached like the forward's): the
 * mma.sync module or the Hopper one, which share the entry names and launch parameters.
 */
export function flashBackwardModule(variant: FlashBackwardVariant): CompiledModule {
  return loadKernels({
    file: flashBackwardFile(variant),
    kernels: [...FLASH_BACKWARD_KERNELS],
    defines: flashBackwardDefines(variant),
    prelude: kernelPrelude(variant.modifiers ?? null),
  });
}

/** Whether the fused backward runs `p`, with the variant it runs. */
function planBackward(p: BackwardProblem): Planned<FlashBackwardVariant> {
  const rule = flashBackwardRule(p);
  if (!rule.ok) return rule;
  const cuda = cudaAvailable();
  if (!cuda.ok) return unsupported(`no CUDA device: ${cuda.reason}`);
  const { properties } = getCudaContext();
  const { major, minor } = properties.computeCapability;
  if (major < 8)
    return unsupported(`compute capability ${major}.${minor}: mma.sync and cp.async need sm_80+`);
  const chosen = flashBackwardVariant(p, targetArch(properties));
  // Past a head dim of 128 only the sm_90a loop of hopper/bwd_dkdv_wide_sm90.cuh runs (flashBackwardRule
  // let it through under ATTNLAB_FLASH_BWD_WIDE=1).
  if (chosen.kernel === 'mma' && chosen.headDim > FLASH_BACKWARD_MAX_HEAD_DIM) {
    return unsupported(
      `head dims H=${p.H}, Hv=${p.Hv} on ${chosen.arch}: past ${FLASH_BACKWARD_MAX_HEAD_DIM} the fused backward ` +
        'runs only on the wgmma loop of sm_90a',
    );
  }
  // The 16-byte mask row loads need an aligned address too (a view may start anywhere).
  const variant =
    chosen.maskRows && p.mask && p.mask.tensor.buffer.ptr % 16n !== 0n
      ? { ...chosen, maskRows: false }
      : chosen;
  const shared = flashBackwardSharedBytes(variant);
  const most = Math.max(shared.dkdv, shared.dq);
  if (most > properties.maxSharedMemoryPerBlockOptin) {
    return unsupported(
      `${flashBackwardVariantKey(variant)} needs ${most} B of shared memory per block, the GPU allows ` +
        `${properties.maxSharedMemoryPerBlockOptin} B`,
    );
  }
  const misaligned = firstMisaligned([
    ['query', p.query],
    ['key', p.key],
    ['value', p.value],
    ['output', p.output],
    ['dOutput', p.dOutput],
  ]);
  if (misaligned) {
    return unsupported(
      `${misaligned} is not 16-byte aligned on the device (the kernels copy 16-byte chunks)`,
    );
  }
  return planned(variant);
}

function run(variant: FlashBackwardVariant, p: BackwardProblem): BackwardOutput {
  const { B, T, S, N, K, H, Hv } = p;
  const module = flashBackwardModule(variant);
  const kernel = (name: (typeof FLASH_BACKWARD_KERNELS)[number]) => module.functions.get(name)!;
  const shared = flashBackwardSharedBytes(variant);
  const e = itemSize(p.dtype);
  const tPad = Math.ceil(T / FLASH_BACKWARD_ROW_PAD) * FLASH_BACKWARD_ROW_PAD;
  const dQ = allocDevice(B * T * N * H * e);
  const dK = allocDevice(B * S * K * H * e);
  const dV = allocDevice(B * S * K * Hv * e);
  // dBias: float32 reductions into a zeroed accumulator of the bias's layout (bwd_common.cuh,
  // ds_mods_tile), which is the result for a float32 bias and is rounded once for a 16-bit one; with
  // variant.dbiasStore the wgmma loop stores it in the bias's dtype instead (each element one position),
  // into a buffer zeroed only where the loop leaves tiles unvisited.
  const bias = p.bias?.tensor ?? null;
  const dBiasStore = bias !== null && variant.dbiasStore === true;
  const dBiasBytes = bias ? bias.size * (dBiasStore ? itemSize(bias.dtype) : 4) : 0;
  const dBiasAccum = bias ? allocDevice(dBiasBytes) : null;
  if (dBiasAccum && (!dBiasStore || skipsTiles(p))) fillDevice32(dBiasAccum, 0, Math.ceil(dBiasBytes / 4));
  // Captured tensors' gradients (ATTNLAB_CAPTURE_GRADS): float32, zeroed, one per capture that needs one.
  const modifiers = modifiersOf(p);
  const captureGrads = (modifiers?.captures ?? []).map((c) => {
    if (!c.needsGrad) return null;
    const buffer = allocDevice(c.tensor.size * 4);
    fillDevice32(buffer, 0);
    return buffer;
  });
  const owned = [dQ, dK, dV, dBiasAccum, ...captureGrads];
  const scratch: DeviceBuffer[] = [];
  const scratchOf = (bytes: number) => {
    const buffer = allocDevice(bytes);
    scratch.push(buffer);
    return buffer;
  };
  try {
    const lse2 = scratchOf(B * N * tPad * 4);
    const dsum = scratchOf(B * N * tPad * 4);
    const dqBytes = flashBackwardDqWorkspaceBytes(variant, p, tPad);
    const dqAccum = dqBytes > 0 ? scratchOf(dqBytes) : null;
    const lengths = (values: Int32Array | null) => {
      if (!values) return 0n;
      const buffer = copyInt32ToDevice(values);
      scratch.push(buffer);
      return buffer.ptr;
    };
    const forward = marshalFlashParams(
      buildFlashParams(p, {
        q: p.query.buffer.ptr,
        k: p.key.buffer.ptr,
        v: p.value.buffer.ptr,
        o: p.output.buffer.ptr,
        lse: p.logSumExp.buffer.ptr,
        bias: bias?.buffer.ptr ?? 0n,
        mask: p.mask?.tensor.buffer.ptr ?? 0n,
        qLens: lengths(p.querySeqLengths),
        kvLens: lengths(p.keyValueSeqLengths),
      }),
    );
    const backward = marshalFlashBwdParams(
      {
        dOutput: p.dOutput.buffer.ptr,
        lse2: lse2.ptr,
        dsum: dsum.ptr,
        dqAccum: dqAccum?.ptr ?? 0n,
        dQuery: dQ.ptr,
        dKey: dK.ptr,
        dValue: dV.ptr,
        outputFloat32: p.output.dtype === 'float32' ? p.output.buffer.ptr : 0n,
        dBias: dBiasAccum?.ptr ?? 0n,
      },
      p.scale,
      tPad,
    );
    const args = [forward, backward];
    // The main kernels of a module built with modifiers or a block mask take two more parameters.
    const mainArgs = hasVariants(p)
      ? [
          ...args,
          marshalCaptures(
            modifiers,
            captureGrads.map((g) => g?.ptr ?? 0n),
          ),
          marshalBlockMask(blockMaskOf(p), T, S),
        ]
      : args;
    const { keys, warps } = variant.tiles;
    // Deterministic mode: the wgmma loops order their dQ adds, the others leave dQ to the dQ pass.
    const dqPass = p.deterministic && !orderedDqAdds(variant);
    if (B * N * T > 0 && S > 0) {
      // 8 rows (warps) per 256-thread block.
      launchKernel(
        kernel('attnlab_flash_bwd_prep'),
        { grid: [Math.ceil((B * N * tPad) / 8), 1, 1], block: [256, 1, 1] },
        args,
      );
      launchKernel(
        kernel(dqPass ? 'attnlab_flash_bwd_dkdv_only' : 'attnlab_flash_bwd_dkdv'),
        {
          grid: [Math.ceil(S / keys), B * K, 1],
          block: [warps * 32, 1, 1],
          sharedBytes: dqPass ? shared.dkdvOnly : shared.dkdv,
        },
        mainArgs,
      );
      if (dqPass) {
        const dq = FLASH_BACKWARD_DQ_TILES;
        launchKernel(
          kernel('attnlab_flash_bwd_dq'),
          { grid: [Math.ceil(T / dq.rows), B * N, 1], block: [dq.warps * 32, 1, 1], sharedBytes: shared.dq },
          mainArgs,
        );
      } else {
        // A grid-stride loop over 8-element chunks; 65535 blocks of 256 cover 134M chunks per pass.
        const chunks = (B * T * N * H) / 8;
        const grid = Math.max(1, Math.min(65535, Math.ceil(chunks / 256)));
        launchKernel(
          kernel('attnlab_flash_bwd_dq_convert'),
          { grid: [grid, 1, 1], block: [256, 1, 1] },
          args,
        );
      }
    }
  } catch (error) {
    for (const buffer of owned) buffer?.release();
    throw error;
  } finally {
    // Stream-ordered pool: a later user of these blocks is enqueued after this call's kernels.
    for (const buffer of scratch) buffer.release();
  }
  const dCaptures: Record<string, Tensor> = {};
  (modifiers?.captures ?? []).forEach((c, i) => {
    const grad = captureGrads[i];
    if (grad) dCaptures[c.name] = Tensor.fromDeviceBuffer(grad, c.tensor.shape, 'float32');
  });
  return {
    dQuery: Tensor.fromDeviceBuffer(dQ, [B, T, N, H], p.dtype),
    dKey: Tensor.fromDeviceBuffer(dK, [B, S, K, H], p.dtype),
    dValue: Tensor.fromDeviceBuffer(dV, [B, S, K, Hv], p.dtype),
    ...(bias && dBiasAccum
      ? {
          dBias: dBiasStore
            ? Tensor.fromDeviceBuffer(dBiasAccum, bias.shape, bias.dtype)
            : dBiasOf(bias, dBiasAccum, kernel('attnlab_flash_bwd_dbias_convert')),
        }
      : {}),
    ...(Object.keys(dCaptures).length > 0 ? { dCaptures } : {}),
    variant: flashBackwardVariantKey(variant),
  };
}

/**
 * Whether the dK/dV loop may leave some (b, n, t, s) tile unvisited, so that a dBias it stores (rather
 * than adds) needs its buffer zeroed first: a causal mask or a window (key blocks walk only the query
 * blocks that see them), lengths (rows and keys past them), a block mask (EMPTY tiles).
 */
export function skipsTiles(p: BackwardProblem): boolean {
  return (
    p.causal ||
    p.window !== null ||
    p.querySeqLengths !== null ||
    p.keyValueSeqLengths !== null ||
    blockMaskOf(p) !== null
  );
}

/** dBias in the bias's shape and dtype from its float32 accumulator (taken, or rounded and released). */
function dBiasOf(bias: Tensor, accum: DeviceBuffer, convert: bigint): Tensor {
  if (bias.dtype === 'float32') return Tensor.fromDeviceBuffer(accum, bias.shape, 'float32');
  const out = allocDevice(bias.size * 2);
  try {
    const grid = Math.max(1, Math.min(65535, Math.ceil(bias.size / 256)));
    launchKernel(convert, { grid: [grid, 1, 1], block: [256, 1, 1] }, [
      { type: 'ptr', value: accum.ptr },
      { type: 'ptr', value: out.ptr },
      { type: 'i64', value: bias.size },
      { type: 'i32', value: bias.dtype === 'float16' ? 1 : 0 },
    ]);
  } catch (error) {
    out.release();
    throw error;
  } finally {
    // Stream-ordered pool: a later user of the accumulator is enqueued after the conversion.
    accum.release();
  }
  return Tensor.fromDeviceBuffer(out, bias.shape, bias.dtype);
}

export const cudaFlashBackward: BackwardBackend<FlashBackwardVariant> = {
  name: 'flash',
  device: 'cuda',
  layouts: ['modifiers'],
  plan: planBackward,
  run,
};
