/**
 * Launchers of src/kernels/fp8/quantise.cu: one function per kernel, each computing its grid.
 *
 * The kernels are bandwidth-bound streams (16 bytes of bf16 in, 8 of e4m3 out per thread and step),
 * so the grid is sized to fill the GPU a few times over and the kernels loop, rather than one
 * thread per element: at B=4, T=8192, N=16, H=128 that is 8.4 M groups of 8, which a 132-SM H200
 * covers with 132 × 8 blocks of 256 threads in 31 steps.
 */
import { loadKernels } from '../runtime/compile.js';
import { getCudaContext } from '../runtime/context.js';
import { f32, i32, i64, launchKernel, ptr } from '../runtime/launch.js';

/** Threads per block of the streaming passes (here and in gradient-kernels.ts). */
export const THREADS = 256;
/** Elements per thread and step (one 16-byte load of bf16). */
export const VEC = 8;
const BLOCKS_PER_SM = 8;

/**
 * The CUfunctions of one .cu file's kernels, looked up once per process (a property read per launch
 * instead of loadKernels' spec key).
 */
export function kernelTable<Name extends string>(
  file: string,
  names: readonly Name[],
): () => Record<Name, bigint> {
  let loaded: Record<Name, bigint> | undefined;
  return () => {
    if (loaded) return loaded;
    const module = loadKernels({ file, kernels: names });
    loaded = Object.fromEntries(names.map((name) => [name, module.functions.get(name)!])) as Record<
      Name,
      bigint
    >;
    return loaded;
  };
}

/** Blocks for `groups` groups of VEC elements: one group per thread, at most 8 blocks per SM (the kernels loop). */
export function gridFor(groups: number): number {
  const limit = getCudaContext().properties.multiprocessorCount * BLOCKS_PER_SM;
  return Math.max(1, Math.min(limit, Math.ceil(groups / THREADS)));
}

const functions = kernelTable('fp8/quantise.cu', [
  'attnlab_fp8_quantise3',
  'attnlab_fp8_current_scales',
  'attnlab_fp8_dequantise',
  'attnlab_fp8_delayed_block',
  'attnlab_fp8_delayed_update',
  'attnlab_fp8_requantise_repaired',
]);

/**
 * bf16 Q, K, V (element counts a multiple of 8) → e4m3 with the scales in the scalar block, and
 * their amax into it; with `amaxOnly`, only the amax (current scaling's first pass).
 */
export function launchQuantise3(
  inputs: readonly [bigint, bigint, bigint],
  outputs: readonly [bigint, bigint, bigint],
  queryElements: number,
  keyValueElements: number,
  block: bigint,
  amaxOnly: boolean,
  stream?: bigint,
): void {
  const [qGroups, kvGroups] = [queryElements / VEC, keyValueElements / VEC];
  launchKernel(
    functions().attnlab_fp8_quantise3,
    { grid: [gridFor(Math.max(qGroups, kvGroups)), 3, 1], block: [THREADS, 1, 1], stream },
    [...inputs.map(ptr), ...outputs.map(ptr), i64(qGroups), i64(kvGroups), ptr(block), i32(amaxOnly ? 1 : 0)],
  );
}

/**
 * Current scaling: every scale and descale of each of `chunks` consecutive blocks from the amax of
 * Q, K, V just recorded in the first.
 */
export function launchCurrentScales(blocks: bigint, fp8Max: number, chunks: number): void {
  launchKernel(functions().attnlab_fp8_current_scales, { grid: [1, 1, 1], block: [32, 1, 1] }, [
    ptr(blocks),
    f32(fp8Max),
    i32(chunks),
  ]);
}

/** e4m3 O → bf16 O with 1/scale_o from the block. */
export function launchDequantise(
  input: bigint,
  output: bigint,
  elements: number,
  block: bigint,
  stream?: bigint,
): void {
  const groups = elements / VEC;
  launchKernel(
    functions().attnlab_fp8_dequantise,
    { grid: [gridFor(groups), 1, 1], block: [THREADS, 1, 1], stream },
    [ptr(input), ptr(output), i64(groups), ptr(block)],
  );
}

/**
 * After the NaN repair of the bf16 O: O8 codes that are NaN where O no longer is get O·scale_o
 * (scale_o from the block), and O that code dequantised (see quantise.cu).
 */
export function launchRequantiseRepaired(o8: bigint, output: bigint, elements: number, block: bigint): void {
  const groups = elements / 16; // 16 codes per load; FP8 head dims are multiples of 16
  launchKernel(
    functions().attnlab_fp8_requantise_repaired,
    { grid: [gridFor(groups), 1, 1], block: [THREADS, 1, 1] },
    [ptr(o8), ptr(output), i64(groups), ptr(block)],
  );
}

/**
 * Delayed scaling: the step's scales (with their caps) from the device state into each of `chunks`
 * consecutive blocks.
 */
export function launchDelayedBlock(state: bigint, blocks: bigint, fp8Max: number, chunks: number): void {
  launchKernel(functions().attnlab_fp8_delayed_block, { grid: [1, 1, 1], block: [32, 1, 1] }, [
    ptr(state),
    ptr(blocks),
    f32(fp8Max),
    i32(chunks),
  ]);
}

/**
 * Delayed scaling: records the step's five amax values (amax_s and amax_o the largest over the
 * `chunks` blocks) as step `step` of the state's rings and updates the five scales by TE's rule
 * (see quantise.cu).
 */
export function launchDelayedUpdate(
  state: bigint,
  blocks: bigint,
  chunks: number,
  historyLength: number,
  step: number,
  mostRecent: boolean,
  margin: number,
  fp8Max: number,
): void {
  launchKernel(functions().attnlab_fp8_delayed_update, { grid: [5, 1, 1], block: [THREADS, 1, 1] }, [
    ptr(state),
    ptr(blocks),
    i32(chunks),
    i32(historyLength),
    i64(step),
    i32(mostRecent ? 1 : 0),
    i32(margin),
    f32(fp8Max),
  ]);
}
