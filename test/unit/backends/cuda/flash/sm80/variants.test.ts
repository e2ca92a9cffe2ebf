/**
 * The CUDA flash backend's host side, without a GPU: variant keys, the tile table, the parameters
 * built from a problem. The compile of each variant's -D set and its stated shared memory are in
 * test/kernels/flash-variants-compile.test.ts, the struct layout in
 * test/kernels/kernel-params-layout.test.ts (`npm run test:kernels`).
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { validateAttention } from '../../../../../../src/api/validate.js';
import { buildFlashParams, marshalFlashParams } from '../../../../../../src/backends/cuda/flash/params.js';
import { chooseFlashTiles } from '../../../../../../src/backends/cuda/flash/sm80/tiles.js';
import {
  flashDefines,
  flashKernelSource,
  flashVariantKey,
  flashVariantSharedBytes,
} from '../../../../../../src/backends/cuda/flash/sm80/variant.js';
import { kernelsDir } from '../../../../../../src/backends/cuda/runtime/compile.js';
import { randomNormal } from '../../../../../../src/tensor/random.js';
import { VARIANTS, variantFor } from '../../../../../support/flash-variant-cases.js';

describe('cuda flash variants (host side)', () => {
  it('names every specialisation in the key', () => {
    assert.equal(flashVariantKey(variantFor(128, 'bfloat16')), 'flash-fwd.sm_90a.bf16.d128.128x64x4');
    assert.equal(flashVariantKey(variantFor(128, 'float32')), 'flash-fwd.sm_90a.f32.d128.32x32x8.fma');
    assert.equal(flashVariantKey(VARIANTS[1][1]()), 'flash-fwd.sm_90a.f16.d64.128x64x4.bias-f32.mask');
    assert.equal(flashVariantKey(variantFor(40, 'bfloat16', {}, 24)), 'flash-fwd.sm_90a.bf16.d48.128x64x4');
  });

  it('takes the tile table, or ATTNLAB_FLASH_TILES when set, and rejects malformed tiles', () => {
    assert.deepEqual(chooseFlashTiles(128, ''), { blockM: 128, blockN: 64, warps: 4, stages: 1 });
    assert.deepEqual(chooseFlashTiles(256, ''), { blockM: 128, blockN: 128, warps: 8, stages: 1 });
    assert.deepEqual(chooseFlashTiles(128, '128x64x4s2'), { blockM: 128, blockN: 64, warps: 4, stages: 2 });
    for (const bad of ['128x64', '100x64x4', '128x60x4', '128x64x4s3']) {
      assert.throws(() => chooseFlashTiles(128, bad), /ATTNLAB_FLASH_TILES/);
    }
  });

  it('fits the shared memory of an H200 block (227 KiB) for every table entry', () => {
    for (const H of [32, 64, 128, 200, 256]) {
      for (const dtype of ['bfloat16', 'float32'] as const) {
        const bytes = flashVariantSharedBytes(variantFor(H, dtype));
        assert.ok(bytes <= 227 * 1024, `H=${H} ${dtype}: ${bytes} B`);
      }
    }
  });

  it('gives the kernel every FLASH_* macro its entry point reads', () => {
    for (const [name, make] of VARIANTS) {
      const variant = make();
      const { file } = flashKernelSource(variant);
      const source = readFileSync(join(kernelsDir(), file), 'utf8');
      const entry = source.slice(
        source.indexOf('#ifdef FLASH_D'),
        source.indexOf('#endif', source.indexOf('#ifdef FLASH_D')),
      );
      const used = new Set(entry.match(/FLASH_[A-Z0-9]+/g));
      const defined = new Set(Object.keys(flashDefines(variant)));
      for (const macro of used)
        assert.ok(defined.has(macro), `${name}: ${file} reads ${macro}, flashDefines lacks it`);
    }
  });

  it('builds FlashParams from the problem: strides, GQA group, flags, window', () => {
    const q = randomNormal([2, 8, 4, 64], { seed: 1, dtype: 'bfloat16' });
    const k = randomNormal([2, 8, 2, 64], { seed: 2, dtype: 'bfloat16' });
    const p = validateAttention(q, k, k, {
      isCausal: true,
      localWindowSize: [5, 0],
      causalAlignment: 'bottom_right',
    });
    const params = buildFlashParams(p, {
      q: 1n,
      k: 2n,
      v: 3n,
      o: 4n,
      lse: 0n,
      bias: 0n,
      mask: 0n,
      qLens: 0n,
      kvLens: 0n,
    });
    assert.deepEqual(params.k, [8 * 2 * 64, 2 * 64, 64]);
    assert.equal(params.group, 2);
    assert.equal(params.flags, 1 | 2 | 4);
    assert.deepEqual([params.windowLeft, params.windowRight], [5, 0]);
    assert.equal(marshalFlashParams(params).type, 'struct');
  });
});
