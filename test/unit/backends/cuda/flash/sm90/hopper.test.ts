/**
 * The flash backend's Hopper path, host side, without a GPU: which case runs on the wgmma kernel
 * and which on mma.sync (the dispatch rule), its variant keys and shared memory, the 704-byte
 * HopperParams. The compiler's layout of HopperParams and the compile of the backend's own -D set
 * for sm_90a are in test/kernels/hopper-compile.test.ts (`npm run test:kernels`).
 */

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { validateAttention } from '../../../../../../src/api/validate.js';
import { buildFlashParams, marshalFlashParams } from '../../../../../../src/backends/cuda/flash/params.js';
import {
  HOPPER_PARAMS_BYTES,
  marshalHopperParams,
} from '../../../../../../src/backends/cuda/flash/sm90/hopper.js';
import {
  BLOCK_MASK_DYNAMIC_REFUSED,
  HOPPER_BY_DEFAULT,
  HOPPER_SHARED_LIMIT,
  hopperBlockM,
  hopperBlockMaskBytes,
  hopperDefines,
  hopperGrid,
  hopperSharedBytes,
  hopperThreads,
  hopperVariant,
  hopperVariantKey,
  MODIFIER_POSITIONS,
  tilesForHeadDims,
} from '../../../../../../src/backends/cuda/flash/sm90/hopper-variant.js';
import { structLayout } from '../../../../../../src/backends/cuda/runtime/launch.js';
import type { AttentionOptions, AttentionProblem } from '../../../../../../src/backends/problem.js';
import { reloadConfig } from '../../../../../../src/config.js';
import { UnsupportedError } from '../../../../../../src/errors.js';
import type { FloatDType } from '../../../../../../src/tensor/dtype.js';
import { randomNormal } from '../../../../../../src/tensor/random.js';
import { Tensor } from '../../../../../../src/tensor/tensor.js';

function problem(H: number, dtype: FloatDType, options: AttentionOptions = {}, Hv = H) {
  const q = randomNormal([2, 8, 4, H], { seed: 1, dtype });
  const k = randomNormal([2, 8, 2, H], { seed: 2, dtype });
  const v = randomNormal([2, 8, 2, Hv], { seed: 3, dtype });
  return validateAttention(q, k, v, options);
}

/** The variant key on sm_90a (no ATTNLAB_FLASH_KERNEL), or `mma: <reason>`. */
function dispatch(H: number, dtype: FloatDType, options: AttentionOptions = {}, Hv = H, arch = 'sm_90a') {
  const choice = hopperVariant(problem(H, dtype, options, Hv), arch, 'wgmma', null);
  return 'variant' in choice ? hopperVariantKey(choice.variant) : `mma: ${choice.reason}`;
}

describe('cuda flash: the Hopper (wgmma) path', () => {
  it('runs bf16/fp16 H = Hv ∈ {64, 128, 256} on sm_90a, causal or not, MHA/GQA, with lengths', () => {
    assert.equal(dispatch(128, 'bfloat16'), 'flash-fwd.sm_90a.bf16.d128.128x128x3wg.pp.lw.ds.sl8.wgmma');
    assert.equal(dispatch(64, 'float16'), 'flash-fwd.sm_90a.f16.d64.192x128x4wg.pp.lw.ds.sl8.wgmma');
    assert.equal(dispatch(256, 'bfloat16'), 'flash-fwd.sm_90a.bf16.d256.128x80x3wg.pp.lw.ds.sl8.wgmma');
    const lengths = { querySeqLengths: [8, 3], keyValueSeqLengths: [5, 0] };
    for (const options of [
      { isCausal: true },
      { isCausal: true, causalAlignment: 'bottom_right' as const },
      lengths,
      { localWindowSize: [4, 0] as [number, number] },
      { isCausal: true, localWindowSize: [3, 0] as [number, number], ...lengths },
    ]) {
      assert.match(dispatch(128, 'bfloat16', options), /\.wgmma$/);
    }
  });

  it('runs H = Hv = 192 (three 64-column boxes) and pads 160 and 144 up to it, BN=112', () => {
    assert.equal(dispatch(192, 'bfloat16'), 'flash-fwd.sm_90a.bf16.d192.128x112x3wg.pp.lw.ds.sl8.wgmma');
    assert.equal(dispatch(160, 'float16'), 'flash-fwd.sm_90a.f16.d192.128x112x3wg.pp.lw.ds.sl8.wgmma');
    assert.equal(
      dispatch(144, 'bfloat16', { isCausal: true }),
      'flash-fwd.sm_90a.bf16.d192.128x112x3wg.pp.lw.ds.sl8.wgmma',
    );
    const choice = hopperVariant(problem(160, 'bfloat16'), 'sm_90a', 'wgmma', null);
    assert.ok('variant' in choice);
    assert.deepEqual(
      [
        hopperDefines(choice.variant).HOPPER_KEY_DIM,
        hopperDefines(choice.variant).HOPPER_VALUE_DIM,
        hopperDefines(choice.variant).HOPPER_BLOCK_N,
      ],
      [192, 192, 112],
    );
  });

  it('runs H and Hv of different box counts with a key and a value head dim each, named d<Dk>v<Dv>', () => {
    assert.equal(
      dispatch(192, 'bfloat16', {}, 128),
      'flash-fwd.sm_90a.bf16.d192v128.128x128x3wg.pp.lw.ds.sl8.wgmma',
    );
    assert.equal(
      dispatch(128, 'float16', {}, 64),
      'flash-fwd.sm_90a.f16.d128v64.128x128x3wg.pp.lw.ds.sl8.wgmma',
    );
    assert.equal(
      dispatch(256, 'bfloat16', {}, 128),
      'flash-fwd.sm_90a.bf16.d256v128.128x96x3wg.pp.lw.ds.sl8.wgmma',
    );
    assert.equal(
      dispatch(64, 'bfloat16', {}, 256),
      'flash-fwd.sm_90a.bf16.d64v256.128x80x3wg.pp.lw.ds.sl8.wgmma',
    );
    // Each dim pads on its own: H=100 → 128, Hv=160 → 192.
    assert.equal(
      dispatch(100, 'bfloat16', {}, 160),
      'flash-fwd.sm_90a.bf16.d128v192.128x112x3wg.pp.lw.ds.sl8.wgmma',
    );
    const choice = hopperVariant(problem(192, 'bfloat16', {}, 128), 'sm_90a', 'wgmma', null);
    assert.ok('variant' in choice);
    assert.equal(hopperDefines(choice.variant).HOPPER_KEY_DIM, 192);
    assert.equal(hopperDefines(choice.variant).HOPPER_VALUE_DIM, 128);
  });

  it('picks every pair of kernel head dims a tile that fits shared memory and the registers, with a Q·Kᵀ shape the kernel has', () => {
    // BN per (Dk, Dv): the rule in hopperTiles; the D=64/128/256 rows are the measured table.
    const expected: Record<string, number> = {
      '64/64': 128,
      '64/128': 128,
      '64/192': 112,
      '64/256': 80,
      '128/64': 128,
      '128/128': 128,
      '128/192': 112,
      '128/256': 80,
      '192/64': 128,
      '192/128': 128,
      '192/192': 112,
      '192/256': 80,
      '256/64': 128,
      '256/128': 96,
      '256/192': 80,
      '256/256': 80,
    };
    const wrappers = new Set([64, 80, 96, 112, 128, 144, 160, 176, 192, 256]); // tiles.cuh qk_step
    for (const dk of [64, 128, 192, 256] as const) {
      for (const dv of [64, 128, 192, 256] as const) {
        const tiles = tilesForHeadDims(dk, dv);
        assert.equal(tiles.blockN, expected[`${dk}/${dv}`], `${dk}/${dv}`);
        assert.equal(tiles.consumers, dk === 64 && dv === 64 ? 3 : 2, `${dk}/${dv}`);
        assert.ok(wrappers.has(tiles.blockN), `${dk}/${dv}: BN=${tiles.blockN}`);
        const choice = hopperVariant(problem(dk, 'bfloat16', {}, dv), 'sm_90a', 'wgmma', null);
        assert.ok('variant' in choice, `${dk}/${dv}`);
        assert.ok(hopperSharedBytes(choice.variant) <= HOPPER_SHARED_LIMIT, `${dk}/${dv}`);
        if (tiles.consumers === 2) assert.ok((3 * tiles.blockN) / 4 + dv / 2 <= 188, `${dk}/${dv} registers`);
      }
    }
  });

  it('pads H and Hv up to the kernel head dim where 3/4 of it is real: 96 → 128, 48 → 64, 200 → 256', () => {
    assert.equal(dispatch(96, 'bfloat16'), 'flash-fwd.sm_90a.bf16.d128.128x128x3wg.pp.lw.ds.sl8.wgmma');
    assert.equal(dispatch(200, 'float16'), 'flash-fwd.sm_90a.f16.d256.128x80x3wg.pp.lw.ds.sl8.wgmma');
    assert.equal(dispatch(48, 'bfloat16'), 'flash-fwd.sm_90a.bf16.d64.192x128x4wg.pp.lw.ds.sl8.wgmma');
    assert.equal(
      dispatch(256, 'bfloat16', {}, 200),
      'flash-fwd.sm_90a.bf16.d256.128x80x3wg.pp.lw.ds.sl8.wgmma',
    );
    assert.equal(
      dispatch(128, 'bfloat16', {}, 104),
      'flash-fwd.sm_90a.bf16.d128.128x128x3wg.pp.lw.ds.sl8.wgmma',
    );
  });

  it('takes three consumers on 80-key tiles at H=128 from T=8192 on, but not with a bias and a mask together', () => {
    const long = (T: number, options: AttentionOptions = {}) => {
      const q = randomNormal([1, T, 1, 128], { seed: 7, dtype: 'bfloat16' });
      const kv = randomNormal([1, 8, 1, 128], { seed: 8, dtype: 'bfloat16' });
      const choice = hopperVariant(validateAttention(q, kv, kv, options), 'sm_90a', 'wgmma', null);
      return 'variant' in choice ? hopperVariantKey(choice.variant) : `mma: ${choice.reason}`;
    };
    assert.equal(long(8192), 'flash-fwd.sm_90a.bf16.d128.192x80x4wg.pp.lw.ds.sl8.wgmma');
    assert.equal(long(8191), 'flash-fwd.sm_90a.bf16.d128.128x128x3wg.pp.lw.ds.sl8.wgmma');
    const mask = randomNormal([1, 1, 8192, 8], { seed: 9 }).astype('bool');
    const bias = randomNormal([1, 1, 8192, 8], { seed: 10, dtype: 'bfloat16' });
    assert.equal(long(8192, { mask }), 'flash-fwd.sm_90a.bf16.d128.192x80x4wg.pp.lw.ds.sl8.mask.wgmma');
    assert.equal(long(8192, { bias }), 'flash-fwd.sm_90a.bf16.d128.192x80x4wg.pp.lw.ds.sl8.bias-bf16.wgmma');
    assert.equal(
      long(8192, { bias, mask }),
      'flash-fwd.sm_90a.bf16.d128.128x128x3wg.pp.lw.ds.sl8.bias-bf16.mask.wgmma',
    );
  });

  it('walks causal and shorter rows on the dynamic persistent grid (HOPPER_DYNAMIC_GRID=1, .dyn), one block per SM', () => {
    // MQA keeps K and V small: the rule reads T, the heads and the tiles, not S.
    const grid = (T: number, H: number, N: number, options: AttentionOptions = {}) => {
      const q = Tensor.zeros([1, T, N, H], 'bfloat16');
      const kv = Tensor.zeros([1, 8, 1, H], 'bfloat16');
      const choice = hopperVariant(validateAttention(q, kv, kv, options), 'sm_90a', 'wgmma', null);
      assert.ok('variant' in choice, JSON.stringify(choice));
      return choice.variant;
    };
    const causal = { isCausal: true };
    // 1024 rows of 32 heads: 256 items on 128-row tiles, 352 on D=64's 192-row ones (11 × 32).
    assert.equal(grid(1024, 128, 32, causal).persistent, false, 'under DYNAMIC_MIN_ITEMS (264)');
    assert.equal(grid(1024, 128, 33, causal).persistent, 'dynamic');
    assert.equal(grid(2048, 64, 32).persistent, 'dynamic', 'non-causal below T=8192');
    assert.equal(grid(8192, 64, 8).persistent, false, 'non-causal from T=8192: the 2-D grid');
    assert.equal(grid(8192, 64, 8, causal).persistent, 'dynamic');
    assert.equal(grid(8192, 256, 8, causal).persistent, 'dynamic');
    // D128_LONG's three-consumer tile keeps the 2-D grid (−2.2% causal on it in the harness).
    assert.equal(grid(8192, 128, 8, causal).persistent, false);
    const mask = Tensor.zeros([1, 1, 2048, 8], 'bool');
    assert.equal(grid(2048, 128, 32, { ...causal, mask }).persistent, false, 'not measured with a mask');
    const v = grid(2048, 128, 32, causal);
    assert.equal(hopperVariantKey(v), 'flash-fwd.sm_90a.bf16.d128.128x128x3wg.pp.lw.ds.dyn.sl8.wgmma');
    assert.equal(hopperDefines(v).HOPPER_DYNAMIC_GRID, 1);
    assert.deepEqual(hopperGrid(v, 2048, 32, 132), [132, 1, 1]);
    assert.deepEqual(hopperGrid(v, 128, 4, 132), [4, 1, 1], 'never more blocks than items');
    // The item slot: one more 8-byte word after the barriers.
    assert.equal(hopperSharedBytes(v), hopperSharedBytes({ ...v, persistent: false }) + 8);
  });

  it('runs an additive bias and a boolean mask on the kernel, named in the variant', () => {
    const mask = randomNormal([1, 1, 8, 8], { seed: 4 }).astype('bool');
    const bias = randomNormal([1, 4, 8, 8], { seed: 5, dtype: 'float32' });
    const biasBf16 = randomNormal([2, 1, 1, 8], { seed: 6, dtype: 'bfloat16' });
    assert.equal(
      dispatch(128, 'bfloat16', { bias }),
      'flash-fwd.sm_90a.bf16.d128.128x128x3wg.pp.lw.ds.sl8.bias-f32.wgmma',
    );
    assert.equal(
      dispatch(64, 'bfloat16', { mask }),
      'flash-fwd.sm_90a.bf16.d64.192x128x4wg.pp.lw.ds.sl8.mask.wgmma',
    );
    assert.equal(
      dispatch(256, 'float16', { bias: biasBf16, mask, isCausal: true }),
      'flash-fwd.sm_90a.f16.d256.128x80x3wg.pp.lw.ds.sl8.bias-bf16.mask.wgmma',
    );
    const choice = hopperVariant(problem(128, 'bfloat16', { bias }), 'sm_90a', 'wgmma', null);
    assert.ok('variant' in choice);
    assert.equal(hopperDefines(choice.variant).HOPPER_BIAS, 1);
    assert.equal(hopperDefines(choice.variant).HOPPER_MASK, 0);
    assert.equal(hopperDefines(choice.variant).HOPPER_RESCALE_SLACK, 8);
  });

  it('takes score/mask modifiers and a block mask: keyed by the set, two consumers, a block mask on the dynamic grid', () => {
    const modifiers = {
      key: 'k3y',
      maskKey: 'k3y',
      cudaSource: '',
      captures: [],
      hasScoreMod: false,
      hasMaskMod: true,
      hasCaptureGrads: false,
      label: 'maskMod kv <= q',
    };
    const blockMask = { kinds: { ptr: 0n }, Bm: 1, Nm: 1, blockQ: 128, blockKV: 128 };
    const variant = (T: number, H: number, N: number, variants: object) => {
      const q = Tensor.zeros([1, T, N, H], 'bfloat16');
      const kv = Tensor.zeros([1, T, N, H], 'bfloat16');
      const p = { ...validateAttention(q, kv, kv, {}), ...variants } as AttentionProblem;
      const choice = hopperVariant(p, 'sm_90a', 'wgmma', null);
      assert.ok('variant' in choice, JSON.stringify(choice));
      return choice.variant;
    };
    // D=128 at T=8192 keeps 128x128 (its tiles align with 128-key blocks), D=64 two consumers (spills with three).
    const long = variant(8192, 128, 1, { modifiers });
    assert.equal(
      hopperVariantKey(long),
      'flash-fwd.sm_90a.bf16.d128.128x128x3wg.pp.lw.ds.sl8.mods-k3y.wgmma',
    );
    assert.equal(hopperDefines(long).ATTNLAB_BLOCK_MASK, undefined);
    const d64 = variant(8192, 64, 1, { modifiers, blockMask });
    assert.equal(
      hopperVariantKey(d64),
      'flash-fwd.sm_90a.bf16.d64.128x128x3wg.pp.lw.ds.sl8.mods-k3y.bmask.wgmma',
    );
    assert.equal(hopperDefines(d64).ATTNLAB_BLOCK_MASK, 1);
    // Modifiers alone keep the 2-D grid where the plain case would take the dynamic one (T < 8192, ≥ 264
    // items); so does a block mask, always. ATTNLAB_BLOCK_MASK_GRID=dynamic, which used to put a block mask
    // on the dynamic grid from 264 items at D ≤ 128 without a score modifier, is refused there with an
    // UnsupportedError (racecheck hazards and slower than the 2-D grid on an H100); where it would not have
    // applied (too few items, D=256, a score modifier) the 2-D grid runs as before; 2d is accepted.
    assert.equal(variant(2048, 128, 32, {}).persistent, 'dynamic');
    assert.equal(variant(2048, 128, 32, { modifiers }).persistent, false);
    assert.equal(variant(2048, 128, 32, { modifiers, blockMask }).persistent, false);
    assert.equal(variant(8192, 128, 16, { modifiers, blockMask }).persistent, false);
    const saved = process.env.ATTNLAB_BLOCK_MASK_GRID;
    try {
      process.env.ATTNLAB_BLOCK_MASK_GRID = '2d';
      reloadConfig();
      assert.equal(variant(8192, 128, 16, { modifiers, blockMask }).persistent, false);
      process.env.ATTNLAB_BLOCK_MASK_GRID = 'dynamic';
      reloadConfig();
      for (const [T, H, N] of [
        [2048, 128, 32],
        [8192, 64, 5],
      ] as const) {
        assert.throws(
          () => variant(T, H, N, { modifiers, blockMask }),
          (e: unknown) =>
            e instanceof UnsupportedError &&
            e.reason === BLOCK_MASK_DYNAMIC_REFUSED &&
            /racecheck/.test(e.message) &&
            /slower/.test(e.message),
        );
      }
      assert.equal(variant(2048, 128, 16, { modifiers, blockMask }).persistent, false);
      assert.equal(variant(8192, 256, 16, { modifiers, blockMask }).persistent, false);
      const scored = { ...modifiers, hasScoreMod: true };
      assert.equal(variant(8192, 128, 16, { modifiers: scored, blockMask }).persistent, false);
      // Without a block mask the knob changes nothing.
      assert.equal(variant(2048, 128, 32, {}).persistent, 'dynamic');
    } finally {
      if (saved === undefined) delete process.env.ATTNLAB_BLOCK_MASK_GRID;
      else process.env.ATTNLAB_BLOCK_MASK_GRID = saved;
      reloadConfig();
    }
    // What the kernels cannot take is refused with the rule's reason (modifiers.ts variantsRule).
    const nine = Array.from({ length: 9 }, (_, i) => ({
      name: `c${i}`,
      tensor: Tensor.zeros([1], 'float32'),
      dtype: 'float32' as const,
      needsGrad: false,
      strides: [0, 0, 0, 0] as [number, number, number, number],
    }));
    const q = Tensor.zeros([1, 8, 1, 128], 'bfloat16');
    const refused = hopperVariant(
      { ...validateAttention(q, q, q, {}), modifiers: { ...modifiers, captures: nine } } as AttentionProblem,
      'sm_90a',
      'wgmma',
      null,
    );
    assert.ok('reason' in refused && refused.reason.includes('at most 8'), JSON.stringify(refused));
  });

  it('ATTNLAB_BLOCK_MASK_TILE=64x64: a block mask at Dk, Dv ≤ 128 on 64 × 64, one consumer, no ping-pong, two blocks an SM of shared memory', () => {
    const modifiers = {
      key: 'd0c',
      maskKey: 'd0c',
      cudaSource: '',
      captures: [],
      hasScoreMod: false,
      hasMaskMod: true,
      hasCaptureGrads: false,
      label: 'maskMod doc[q] == doc[kv]',
    };
    const blockMask = { kinds: { ptr: 0n }, Bm: 1, Nm: 1, blockQ: 128, blockKV: 128 };
    const variant = (H: number, variants: object) => {
      const q = Tensor.zeros([1, 8192, 2, H], 'bfloat16');
      const p = { ...validateAttention(q, q, q, {}), ...variants } as AttentionProblem;
      const choice = hopperVariant(p, 'sm_90a', 'wgmma', null);
      assert.ok('variant' in choice, JSON.stringify(choice));
      return choice.variant;
    };
    const saved = process.env.ATTNLAB_BLOCK_MASK_TILE;
    try {
      // Off by default: the 128 × 128 two-consumer tile.
      delete process.env.ATTNLAB_BLOCK_MASK_TILE;
      reloadConfig();
      assert.equal(variant(128, { modifiers, blockMask }).consumers, 2);
      process.env.ATTNLAB_BLOCK_MASK_TILE = '64x64';
      reloadConfig();
      const short = variant(128, { modifiers, blockMask });
      assert.equal(
        hopperVariantKey(short),
        'flash-fwd.sm_90a.bf16.d128.64x64x2wg.lw.ds.sl8.mods-d0c.bmask.wgmma',
      );
      assert.equal(hopperDefines(short).HOPPER_CONSUMERS, 1);
      assert.equal(hopperDefines(short).HOPPER_PINGPONG, 0);
      assert.deepEqual(hopperGrid(short, 8192, 2, 132), [128, 2, 1]);
      assert.equal(hopperThreads(short), 256);
      // Two blocks in the SM's 228 KiB, each with the 1 KiB the SM keeps a block.
      const bytes = hopperSharedBytes(short) + hopperBlockMaskBytes(short, 8192);
      assert.equal(bytes, 1024 + 64 * 128 * 2 + 2 * 64 * 256 * 2 + 80 + 2 * 4 * 4);
      assert.ok(2 * (bytes + 1024) <= 228 * 1024);
      assert.equal(variant(64, { modifiers, blockMask }).consumers, 1);
      // D=256, modifiers without a block mask, and no modifiers keep their tiles.
      assert.equal(variant(256, { modifiers, blockMask }).consumers, 2);
      assert.equal(variant(128, { modifiers }).consumers, 2);
      assert.equal(variant(128, {}).consumers, 3);
      process.env.ATTNLAB_BLOCK_MASK_TILE = '32x32';
      assert.throws(() => reloadConfig(), /ATTNLAB_BLOCK_MASK_TILE/);
    } finally {
      if (saved === undefined) delete process.env.ATTNLAB_BLOCK_MASK_TILE;
      else process.env.ATTNLAB_BLOCK_MASK_TILE = saved;
      reloadConfig();
    }
  });

  it('modifiers: the fast tanh and position defines, D=256 on 64 keys, T up to 2^21, the bitmaps in shared memory', () => {
    const modifiers = {
      key: 'm0d',
      maskKey: 'm0d',
      cudaSource: '',
      captures: [],
      hasScoreMod: true,
      hasMaskMod: false,
      hasCaptureGrads: false,
      label: 'scoreMod score',
    };
    const blockMask = { kinds: { ptr: 0n }, Bm: 1, Nm: 1, blockQ: 128, blockKV: 128 };
    const problem = (T: number, H: number, variants: object) => {
      const q = Tensor.zeros([1, T, 1, H], 'bfloat16');
      return { ...validateAttention(q, q, q, {}), ...variants } as AttentionProblem;
    };
    const variant = (T: number, H: number, variants: object) => {
      const choice = hopperVariant(problem(T, H, variants), 'sm_90a', 'wgmma', null);
      assert.ok('variant' in choice, JSON.stringify(choice));
      return choice.variant;
    };
    const plain = hopperDefines(variant(2048, 128, {}));
    assert.equal(plain.ATTNLAB_FAST_TANH, undefined);
    assert.equal(plain.ATTNLAB_POSITIONS_BELOW_2_22, undefined);
    const modified = hopperDefines(variant(2048, 128, { modifiers }));
    assert.equal(modified.ATTNLAB_FAST_TANH, 1);
    assert.equal(modified.ATTNLAB_POSITIONS_BELOW_2_22, 1);
    // Score modifiers at D=256: 64 keys a tile (80 spilled); D=192 keeps 112, D=128 128.
    assert.equal(variant(2048, 256, {}).blockN, 80);
    assert.equal(variant(2048, 256, { modifiers }).blockN, 64);
    assert.equal(variant(2048, 192, { modifiers }).blockN, 112);
    assert.equal(variant(2048, 128, { modifiers }).blockN, 128);
    // Positions past 2^21 leave modifiers to the mma.sync kernel, with the reason.
    assert.equal(MODIFIER_POSITIONS, 2 ** 21);
    const q = Tensor.zeros([1, 8, 1, 128], 'bfloat16');
    const kv = Tensor.zeros([1, 8, 1, 128], 'bfloat16');
    const long = { ...validateAttention(q, kv, kv, {}), S: 2 ** 21 + 1, modifiers } as AttentionProblem;
    const refused = hopperVariant(long, 'sm_90a', 'wgmma', null);
    assert.ok('reason' in refused && refused.reason.includes(`up to ${2 ** 21}`), JSON.stringify(refused));
    // The block mask's bitmaps: 1 + consumers maps of ceil(ceil(S/BN)/32) words, twice on the dynamic grid.
    const masked = variant(8192, 128, { modifiers, blockMask });
    assert.equal(hopperBlockMaskBytes(masked, 8192), 4 * 3 * 2);
    assert.equal(hopperBlockMaskBytes(masked, 8193), 4 * 3 * 3);
    assert.equal(hopperBlockMaskBytes({ ...masked, persistent: 'dynamic' }, 8192), 2 * 4 * 3 * 2);
    assert.equal(hopperBlockMaskBytes(variant(8192, 128, { modifiers }), 8192), 0);
  });

  it('leaves every other case to the mma.sync kernel, saying why', () => {
    const cases: Array<[string, string]> = [
      [dispatch(128, 'float32'), 'dtype float32'],
      [dispatch(80, 'bfloat16'), 'under 3/4'],
      [dispatch(32, 'bfloat16'), 'under 3/4'],
      [dispatch(136, 'bfloat16'), "H=136: under 3/4 of the kernel's head dim 192"],
      [dispatch(128, 'bfloat16', {}, 72), "Hv=72: under 3/4 of the kernel's head dim 128"],
      [dispatch(40, 'bfloat16', {}, 128), 'H=40: under 3/4'],
      [dispatch(192, 'bfloat16', {}, 136), 'Hv=136: under 3/4'],
      [dispatch(264, 'bfloat16', {}, 256), 'H=264: 5 boxes of 64 columns'],
      [dispatch(128, 'bfloat16', {}, 128, 'sm_80'), 'target sm_80'],
      [dispatch(128, 'bfloat16', {}, 128, 'sm_89'), 'target sm_89'],
    ];
    for (const [got, reason] of cases)
      assert.ok(got.startsWith('mma: ') && got.includes(reason), `${got} / ${reason}`);
    assert.deepEqual(hopperVariant(problem(128, 'bfloat16'), 'sm_90a', 'mma'), {
      reason: 'ATTNLAB_FLASH_KERNEL=mma',
    });
    // Unset: HOPPER_BY_DEFAULT decides.
    const unset = hopperVariant(problem(128, 'bfloat16'), 'sm_90a', undefined, null);
    assert.equal('variant' in unset, HOPPER_BY_DEFAULT);
  });

  it('an explicit mma.sync tile choice (ATTNLAB_FLASH_TILES) runs the mma.sync kernel, under either setting', () => {
    for (const choice of ['wgmma', undefined] as const) {
      const got = hopperVariant(problem(128, 'bfloat16'), 'sm_90a', choice, '128x64x4s2');
      const expected =
        choice === undefined && !HOPPER_BY_DEFAULT ? 'opt-in' : 'ATTNLAB_FLASH_TILES=128x64x4s2';
      assert.ok('reason' in got && got.reason.includes(expected), JSON.stringify(got));
    }
  });

  it('fits every variant in an H200 block (227 KiB) and sizes Q, two K+V stages and the barriers (q_full, 4 per stage, q_empty)', () => {
    const rows = { 64: 192, 128: 128, 192: 128, 256: 128 } as const;
    const pairs = ([64, 128, 192, 256] as const).map((H) => [H, H] as const);
    for (const [H, Hv] of [...pairs, [192, 128], [256, 64]] as const) {
      const choice = hopperVariant(problem(H, 'bfloat16', {}, Hv), 'sm_90a', 'wgmma', null);
      assert.ok('variant' in choice);
      const v = choice.variant;
      const bytes = hopperSharedBytes(v);
      assert.equal(hopperBlockM(v), H === Hv ? rows[H] : 128);
      assert.equal(hopperThreads(v), 128 * (v.consumers + 1));
      assert.equal(bytes, 1024 + hopperBlockM(v) * H * 2 + 2 * v.blockN * (H + Hv) * 2 + 8 * 10);
      assert.ok(bytes <= 227 * 1024, `H=${H} Hv=${Hv}: ${bytes} B`);
      // Each 64-column box of a K/V tile must start on a 1024-byte swizzle atom.
      assert.equal((v.blockN * 128) % 1024, 0);
    }
  });

  it('marshals HopperParams: three 128-byte tensor maps, then FlashParams, 704 bytes', () => {
    const p = problem(128, 'bfloat16', { isCausal: true });
    const flash = marshalFlashParams(
      buildFlashParams(p, { q: 1n, k: 2n, v: 3n, o: 4n, lse: 0n, bias: 0n, mask: 0n, qLens: 0n, kvLens: 0n }),
    );
    const maps = [1n, 2n, 3n].map((x) => new BigUint64Array(16).fill(x));
    const arg = marshalHopperParams(maps, flash);
    assert.equal(arg.type, 'struct');
    if (arg.type !== 'struct' || flash.type !== 'struct') return;
    assert.equal(arg.fields[16].value, 2n);
    assert.equal(arg.fields[48].value, 1n, 'FlashParams.q follows the maps');
    assert.equal(HOPPER_PARAMS_BYTES, 704);
    // The dynamic grid's work counter: the first word after FlashParams (hopper_fwd.cu, byte 664).
    const withCounter = marshalHopperParams(maps, flash, 0xc0ffee00n);
    if (withCounter.type !== 'struct') return;
    const at = 48 + flash.fields.length;
    assert.equal(withCounter.fields[at].value, 0xc0ffee00n);
    assert.equal(structLayout(withCounter.fields).offsets[at], 664);
    assert.equal(structLayout(withCounter.fields).size, 704);
    assert.equal(arg.fields[at].value, 0n, 'no counter: a null pointer');
  });
});
