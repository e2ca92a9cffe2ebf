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
import { type KernelArg, launchKernel } from '../../runtime/launch.js';
import {
  beginLaunchGroup,
  endLaunchGroup,
  GROUP_CAPTURING,
  GROUP_LAUNCHED,
  type LaunchGraph,
  launchGroupFor,
} from '../../runtime/launch-graph.js';
import { allocDevice, copyInt32ToDevice, fillDevice32, firstMisaligned } from '../../runtime/memory.js';
import {
  blockMaskOf,
  hasVariants,
  kernelPrelude,
  marshalBlockMask,
  marshalCaptures,
  modifiersOf,
} from '../modifiers.js';
import { buildFlashParams, FLASH_PARAMS_BYTES, packFlashParams } from '../params.js';
import { FLASH_BWD_PARAMS_BYTES, packFlashBwdParams } from './backward-params.js';
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
  // No closures a call (under tsx each one made costs a defineProperty of its name).
  const kernels = module.functions;
  const shared = flashBackwardSharedBytes(variant);
  const e = itemSize(p.dtype);
  const tPad = Math.ceil(T / FLASH_BACKWARD_ROW_PAD) * FLASH_BACKWARD_ROW_PAD;
  // Taken last-returned first: a caller that frees a call's gradients in their order (dQuery, dKey, dValue, as
  // a loop over them or a tidy() scope does) gets each block back in the same role from the pool (whose free
  // blocks of a size go out last-freed first), and with it the same launch-group signature.
  const dV = allocDevice(B * S * K * Hv * e);
  const dK = allocDevice(B * S * K * H * e);
  const dQ = allocDevice(B * T * N * H * e);
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
  const captureGrads = modifiers ? captureGradients(modifiers) : [];
  const owned = [dQ, dK, dV, dBiasAccum, ...captureGrads];
  const scratch: DeviceBuffer[] = [];
  try {
    const lse2 = scratchBlock(B * N * tPad * 4, scratch);
    const dsum = scratchBlock(B * N * tPad * 4, scratch);
    const dqBytes = flashBackwardDqWorkspaceBytes(variant, p, tPad);
    const dqAccum = dqBytes > 0 ? scratchBlock(dqBytes, scratch) : null;
    const qLens = p.querySeqLengths ? scratchLengths(p.querySeqLengths, scratch) : 0n;
    const kvLens = p.keyValueSeqLengths ? scratchLengths(p.keyValueSeqLengths, scratch) : 0n;
    // Both structs packed once, into the bytes that are also the launch group's signature (with the
    // launches' geometry after them, writeGeometry): each of the call's launches copies them.
    const signature = new Uint8Array(SIGNATURE_BYTES);
    const view = new DataView(signature.buffer);
    packFlashParams(
      buildFlashParams(p, {
        q: p.query.buffer.ptr,
        k: p.key.buffer.ptr,
        v: p.value.buffer.ptr,
        o: p.output.buffer.ptr,
        lse: p.logSumExp.buffer.ptr,
        bias: bias?.buffer.ptr ?? 0n,
        mask: p.mask?.tensor.buffer.ptr ?? 0n,
        qLens,
        kvLens,
      }),
      view,
      0,
    );
    packFlashBwdParams(
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
      view,
      BACKWARD_AT,
    );
    const args: KernelArg[] = [
      { type: 'bytes', bytes: signature.subarray(0, FLASH_PARAMS_BYTES) },
      { type: 'bytes', bytes: signature.subarray(BACKWARD_AT, BACKWARD_AT + FLASH_BWD_PARAMS_BYTES) },
    ];
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
    // Deterministic mode: the wgmma loops order their dQ adds, the others leave dQ to the dQ pass.
    const dqPass = p.deterministic && !orderedDqAdds(variant);
    if (B * N * T > 0 && S > 0) {
      const launches: BackwardLaunches = {
        prep: kernels.get('attnlab_flash_bwd_prep')!,
        main: kernels.get(dqPass ? 'attnlab_flash_bwd_dkdv_only' : 'attnlab_flash_bwd_dkdv')!,
        last: kernels.get(dqPass ? 'attnlab_flash_bwd_dq' : 'attnlab_flash_bwd_dq_convert')!,
        dqPass,
        // 8 rows (warps) per 256-thread block.
        prepGrid: Math.ceil((B * N * tPad) / 8),
        mainGrid: Math.ceil(S / variant.tiles.keys),
        mainRows: B * K,
        mainThreads: variant.tiles.warps * 32,
        mainShared: dqPass ? shared.dkdvOnly : shared.dkdv,
        // The dQ pass: one block per FLASH_BACKWARD_DQ_TILES.rows query rows and (b, n). Otherwise a
        // grid-stride loop over 8-element chunks; 65535 blocks of 256 cover 134M chunks per pass.
        lastGrid: dqPass
          ? Math.ceil(T / FLASH_BACKWARD_DQ_TILES.rows)
          : Math.max(1, Math.min(65535, Math.ceil((B * T * N * H) / 8 / 256))),
        lastRows: dqPass ? B * N : 1,
        lastThreads: dqPass ? FLASH_BACKWARD_DQ_TILES.warps * 32 : 256,
        lastShared: dqPass ? shared.dq : 0,
        args,
        mainArgs,
      };
      // Without a bias, captures or a block mask, everything the launches read that can change between
      // calls is in the two packed structs and the geometry: their bytes are the group's signature, and a
      // repeated call (a training step's backward, its gradients' blocks back from the pool) is one graph
      // launch instead of three cuLaunchKernel.
      if (bias !== null || hasVariants(p)) launchBackward(launches);
      else {
        writeGeometry(signature, launches);
        const group = launchGroupFor(backwardGroups(module), signature, GRAPHS_PER_MODULE, true);
        const step = beginLaunchGroup(group, signature);
        if (step !== GROUP_LAUNCHED) {
          let launched = false;
          try {
            launchBackward(launches);
            launched = true;
          } finally {
            // A capture the driver refused ran nothing: the launches again, plainly.
            if (step === GROUP_CAPTURING && !endLaunchGroup(group, signature, launched) && launched)
              launchBackward(launches);
          }
        }
      }
    }
  } catch (error) {
    for (const buffer of owned) buffer?.release();
    throw error;
  } finally {
    // Stream-ordered pool: a later user of these blocks is enqueued after this call's kernels. Released
    // last-taken first, so that the next call of the shape takes each block back in the same role (the
    // pool hands out the last released block of a size first) and keeps its launch group's signature.
    for (let i = scratch.length - 1; i >= 0; i--) scratch[i].release();
  }
  const dCaptures: Record<string, Tensor> = {};
  if (modifiers)
    for (let i = 0; i < modifiers.captures.length; i++) {
      const c = modifiers.captures[i];
      const grad = captureGrads[i];
      if (grad) dCaptures[c.name] = Tensor.fromDeviceBuffer(grad, c.tensor.shape, 'float32');
    }
  return {
    dQuery: Tensor.fromDeviceBuffer(dQ, [B, T, N, H], p.dtype),
    dKey: Tensor.fromDeviceBuffer(dK, [B, S, K, H], p.dtype),
    dValue: Tensor.fromDeviceBuffer(dV, [B, S, K, Hv], p.dtype),
    ...(bias && dBiasAccum
      ? {
          dBias: dBiasStore
            ? Tensor.fromDeviceBuffer(dBiasAccum, bias.shape, bias.dtype)
            : dBiasOf(bias, dBiasAccum, kernels.get('attnlab_flash_bwd_dbias_convert')!),
        }
      : {}),
    ...(Object.keys(dCaptures).length > 0 ? { dCaptures } : {}),
    variant: flashBackwardVariantKey(variant),
  };
}

/** Captured tensors' gradients (ATTNLAB_CAPTURE_GRADS): float32, zeroed, one per capture that needs one. */
function captureGradients(modifiers: NonNullable<ReturnType<typeof modifiersOf>>): (DeviceBuffer | null)[] {
  const grads: (DeviceBuffer | null)[] = [];
  for (const c of modifiers.captures) {
    if (!c.needsGrad) {
      grads.push(null);
      continue;
    }
    const buffer = allocDevice(c.tensor.size * 4);
    fillDevice32(buffer, 0);
    grads.push(buffer);
  }
  return grads;
}

/** A block of `bytes` for one call, released with the call's scratch. */
function scratchBlock(bytes: number, scratch: DeviceBuffer[]): DeviceBuffer {
  const buffer = allocDevice(bytes);
  scratch.push(buffer);
  return buffer;
}

/** A call's launches: the kernels, their geometry and arguments (the main kernel's may add two). */
interface BackwardLaunches {
  readonly prep: bigint;
  readonly main: bigint;
  /** dq_convert, or the dQ pass in deterministic mode without ordered adds. */
  readonly last: bigint;
  readonly dqPass: boolean;
  readonly prepGrid: number;
  readonly mainGrid: number;
  readonly mainRows: number;
  readonly mainThreads: number;
  readonly mainShared: number;
  readonly lastGrid: number;
  readonly lastRows: number;
  readonly lastThreads: number;
  readonly lastShared: number;
  readonly args: readonly KernelArg[];
  readonly mainArgs: readonly KernelArg[];
}

function launchBackward(l: BackwardLaunches): void {
  launchKernel(l.prep, { grid: [l.prepGrid, 1, 1], block: [256, 1, 1] }, l.args);
  launchKernel(
    l.main,
    { grid: [l.mainGrid, l.mainRows, 1], block: [l.mainThreads, 1, 1], sharedBytes: l.mainShared },
    l.mainArgs,
  );
  launchKernel(
    l.last,
    { grid: [l.lastGrid, l.lastRows, 1], block: [l.lastThreads, 1, 1], sharedBytes: l.lastShared },
    l.dqPass ? l.mainArgs : l.args,
  );
}

/** Where the backward's struct starts in a call's bytes: after the forward's, 16-byte aligned (as launch.ts places it). */
const BACKWARD_AT = Math.ceil(FLASH_PARAMS_BYTES / 16) * 16;
/** Where the geometry's int32 words start: the kernels chosen and the three launches' sizes. */
const GEOMETRY_AT = Math.ceil((BACKWARD_AT + FLASH_BWD_PARAMS_BYTES) / 4) * 4;
const GEOMETRY_WORDS = 10;
const SIGNATURE_BYTES = GEOMETRY_AT + GEOMETRY_WORDS * 4;

/**
 * Completes a call's signature (its two packed structs, every pointer and scalar the launches read) with
 * the kernels chosen and the launch geometry: then it holds everything the launches of one module read
 * that can change between calls.
 */
function writeGeometry(signature: Uint8Array, l: BackwardLaunches): void {
  const words = new Int32Array(signature.buffer, GEOMETRY_AT, GEOMETRY_WORDS);
  words[0] = l.dqPass ? 1 : 0;
  words[1] = l.prepGrid;
  words[2] = l.mainGrid;
  words[3] = l.mainRows;
  words[4] = l.mainThreads;
  words[5] = l.mainShared;
  words[6] = l.lastGrid;
  words[7] = l.lastRows;
  words[8] = l.lastThreads;
  words[9] = l.lastShared;
}

/** A padding-length list on the device for one call (released with the call's scratch). */
function scratchLengths(values: Int32Array, scratch: DeviceBuffer[]): bigint {
  const buffer = copyInt32ToDevice(values);
  scratch.push(buffer);
  return buffer.ptr;
}

/**
 * The launch groups of each loaded module (a module is one device's and one variant's, kept for the process
 * by compile.ts), one captured graph each: a training loop's gradients and scratch come back from the pool in
 * a cycle of a few arrangements where other tensors of their sizes are freed between calls
 * (launch-graph.ts, launchGroupFor). Only under ATTNLAB_LAUNCH_GRAPH=all (opt-in until the GPU suite runs it); otherwise the launches one by one.
 */
const groups = new WeakMap<CompiledModule, LaunchGraph[]>();
const GRAPHS_PER_MODULE = 8;

function backwardGroups(module: CompiledModule): LaunchGraph[] {
  let kept = groups.get(module);
  if (!kept) {
    kept = [];
    groups.set(module, kept);
  }
  return kept;
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
