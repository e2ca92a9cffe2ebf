/**
 * The flash kernel variants both the host-side tests (test/unit/backends/cuda/flash/sm80/variants.test.ts) and the nvcc
 * compile checks (test/kernels/flash-variants-compile.test.ts) walk: one per kernel form the variant
 * table can choose.
 */
import { validateAttention } from '../../src/api/validate.js';
import { chooseFlashTiles } from '../../src/backends/cuda/flash/sm80/tiles.js';
import { type FlashVariant, flashVariant } from '../../src/backends/cuda/flash/sm80/variant.js';
import type { AttentionOptions } from '../../src/backends/problem.js';
import type { FloatDType } from '../../src/tensor/dtype.js';
import { randomNormal } from '../../src/tensor/random.js';

/** The sm_90a flash variant of a small (1, 8, 2, H) problem with these options. */
export function variantFor(
  H: number,
  dtype: FloatDType,
  options: AttentionOptions = {},
  Hv = H,
): FlashVariant {
  const q = randomNormal([1, 8, 2, H], { seed: 1, dtype });
  const v = randomNormal([1, 8, 2, Hv], { seed: 2, dtype });
  return flashVariant(validateAttention(q, q, v, options), 'sm_90a');
}

export const VARIANTS: Array<[string, () => FlashVariant]> = [
  ['bf16 H=128 (table)', () => variantFor(128, 'bfloat16')],
  [
    'f16 H=64 with a float32 bias and a mask',
    () =>
      variantFor(64, 'float16', {
        bias: randomNormal([1, 2, 8, 8], { seed: 3, dtype: 'float32' }),
        mask: randomNormal([1, 1, 8, 8], { seed: 4 }).astype('bool'),
      }),
  ],
  ['bf16 H=200 (8 warps)', () => variantFor(200, 'bfloat16')],
  [
    'bf16 H=128, two K/V stages (128x64x4s2)',
    () => ({ ...variantFor(128, 'bfloat16'), tiles: chooseFlashTiles(128, '128x64x4s2') }),
  ],
  ['bf16 H=40 Hv=24 (padded to 48)', () => variantFor(40, 'bfloat16', {}, 24)],
  ['float32 H=128 (fma kernel)', () => variantFor(128, 'float32')],
];
