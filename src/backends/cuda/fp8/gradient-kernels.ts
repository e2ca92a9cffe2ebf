/**
 * Launchers of src/kernels/fp8/gradients.cu, the quantising passes around cuDNN's FP8 backward:
 * bf16 dO → FP8 (with its amax) before the graph, FP8 dQ, dK, dV → bf16 after. Like the forward's
 * passes (kernels.ts) they stream 16 bytes of bf16 per thread and step over a grid that fills the
 * GPU a few times (8 blocks of 256 threads per SM) and loops.
 */
import type { Fp8DType } from '../../../tensor/dtype.js';
import { i32, i64, launchKernel, ptr } from '../runtime/launch.js';
import { gridFor, kernelTable, THREADS, VEC } from './kernels.js';

const functions = kernelTable('fp8/gradients.cu', [
  'attnlab_fp8_quantise_gradient',
  'attnlab_fp8_dequantise_gradients',
]);

const isE5m2 = (dtype: Fp8DType) => (dtype === 'float8_e5m2' ? 1 : 0);

/** bf16 dO (a multiple of 8 elements) → `dtype` codes with the block's scale_dO; amax_dO into the block. */
export function launchQuantiseGradient(
  input: bigint,
  output: bigint,
  elements: number,
  block: bigint,
  dtype: Fp8DType,
): void {
  const groups = elements / VEC;
  launchKernel(
    functions().attnlab_fp8_quantise_gradient,
    { grid: [gridFor(groups), 1, 1], block: [THREADS, 1, 1] },
    [ptr(input), ptr(output), i64(groups), ptr(block), i32(isE5m2(dtype))],
  );
}

/** dQ8, dK8, dV8 (`dtype` codes) → bf16 with 1/scale_dQ, 1/scale_dK, 1/scale_dV from the block. */
export function launchDequantiseGradients(
  inputs: readonly [bigint, bigint, bigint],
  outputs: readonly [bigint, bigint, bigint],
  queryElements: number,
  keyValueElements: number,
  block: bigint,
  dtype: Fp8DType,
): void {
  const [qGroups, kvGroups] = [queryElements / VEC, keyValueElements / VEC];
  launchKernel(
    functions().attnlab_fp8_dequantise_gradients,
    { grid: [gridFor(Math.max(qGroups, kvGroups)), 3, 1], block: [THREADS, 1, 1] },
    [...inputs.map(ptr), ...outputs.map(ptr), i64(qGroups), i64(kvGroups), ptr(block), i32(isE5m2(dtype))],
  );
}
