/**
 * The CUDA flash kernels against nvcc, without a GPU: the exact -D set the backend hands NVRTC
 * compiles for sm_90a, and the compiled kernel's own statement of its shared memory per block
 * (attnlab_flash_fwd*_shared_bytes, read from the CUBIN) is what the launcher asks for. A macro the
 * kernel reads and flashDefines lacks fails every mma variant on the GPU; a launcher formula without
 * the second K/V stage lets two-stage launches write past their memory. Skips without nvcc.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { validateAttention } from '../../src/api/validate.js';
import { compileOptions, kernelsDir } from '../../src/backends/cuda/compile.js';
import { chooseFlashTiles } from '../../src/backends/cuda/flash/tiles.js';
import {
  type FlashVariant,
  flashDefines,
  flashKernelSource,
  flashVariant,
  flashVariantKey,
  flashVariantSharedBytes,
} from '../../src/backends/cuda/flash/variant.js';
import type { AttentionOptions } from '../../src/backends/problem.js';
import type { FloatDType } from '../../src/tensor/dtype.js';
import { randomNormal } from '../../src/tensor/random.js';
import { elfSymbolBytes } from '../support/elf.js';

function variantFor(H: number, dtype: FloatDType, options: AttentionOptions = {}, Hv = H): FlashVariant {
  const q = randomNormal([1, 8, 2, H], { seed: 1, dtype });
  const v = randomNormal([1, 8, 2, Hv], { seed: 2, dtype });
  return flashVariant(validateAttention(q, q, v, options), 'sm_90a');
}

const VARIANTS: Array<[string, () => FlashVariant]> = [
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

describe('cuda flash variants against nvcc', () => {
  const nvcc = spawnSync('nvcc', ['--version']).status === 0;
  const scratch = mkdtempSync(join(tmpdir(), 'attnlab-flash-cubin-'));
  after(() => rmSync(scratch, { recursive: true, force: true }));
  VARIANTS.forEach(([name, make], index) => {
    it(`compiles with the backend's own defines and states the shared memory the launcher asks for: ${name}`, {
      skip: nvcc ? false : 'nvcc not on PATH',
    }, () => {
      const variant = make();
      const { file, name: entry, sharedBytesSymbol } = flashKernelSource(variant);
      const cubin = join(scratch, `${index}.cubin`);
      const defines = compileOptions(
        { file, kernels: [entry], defines: flashDefines(variant) },
        'sm_90a',
      ).filter((o) => o.startsWith('-D'));
      const args = ['-cubin', '-arch=sm_90a', '-std=c++17', '-I', kernelsDir(), ...defines, '-o', cubin];
      const result = spawnSync('nvcc', [...args, join(kernelsDir(), file)], { encoding: 'utf8' });
      assert.equal(result.status, 0, `nvcc ${defines.join(' ')}:\n${result.stderr}`);
      const stated = elfSymbolBytes(readFileSync(cubin), sharedBytesSymbol).readUInt32LE(0);
      assert.equal(
        flashVariantSharedBytes(variant),
        stated,
        `${flashVariantKey(variant)}: the launcher asks for ${flashVariantSharedBytes(variant)} B, the kernel states ${stated} B`,
      );
    });
  });
});
