/**
 * The flash kernels' side of score/mask modifiers and block masks, without a GPU: the two kernel
 * parameters as the kernels read them, the variant keys and defines, what the forward and backward
 * rules refuse, and the fused backward's bias/mask rule. The float64 modifier oracle the GPU suite
 * uses (test/support/modifier-reference.ts) is held here to the library's reference given the same
 * dense bias or mask.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { attention } from '../../../../../src/api/attention.js';
import { attentionBackward } from '../../../../../src/api/backward.js';
import { validateAttention } from '../../../../../src/api/validate.js';
import { validateBackward } from '../../../../../src/api/validate-backward.js';
import {
  type FlashModifiers,
  marshalBlockMask,
  marshalCaptures,
  variantsRule,
} from '../../../../../src/backends/cuda/flash/modifiers.js';
import { skipsTiles } from '../../../../../src/backends/cuda/flash/sm80/backward.js';
import {
  biasContributors,
  chooseFlashBackwardKernel,
  flashBackwardDefines,
  flashBackwardFile,
  flashBackwardRule,
  flashBackwardSharedBytes,
  flashBackwardVariant,
  flashBackwardVariantKey,
  maskRowsFit,
  orderedDqAdds,
} from '../../../../../src/backends/cuda/flash/sm80/backward-variant.js';
import {
  flashDefines,
  flashVariant,
  flashVariantKey,
} from '../../../../../src/backends/cuda/flash/sm80/variant.js';
import { reloadConfig } from '../../../../../src/config.js';
import { randomNormal } from '../../../../../src/tensor/random.js';
import { Tensor } from '../../../../../src/tensor/tensor.js';
import {
  alibiCase,
  blockMaskFrom,
  causalCase,
  relativeBiasCase,
} from '../../../../support/modifier-cases.js';
import { modifierReference } from '../../../../support/modifier-reference.js';

function mods(captures: FlashModifiers['captures'] = [], cudaSource = ''): FlashModifiers {
  return {
    key: 'abc123',
    maskKey: '',
    cudaSource,
    captures,
    hasScoreMod: true,
    hasMaskMod: false,
    hasCaptureGrads: captures.some((c) => c.needsGrad),
    label: 'test',
  };
}
const NO_STRIDES = [0, 0, 0, 0] as const;

const q = randomNormal([2, 16, 4, 64], { seed: 1, dtype: 'bfloat16' });
const kv = randomNormal([2, 24, 2, 64], { seed: 2, dtype: 'bfloat16' });

describe('flash modifier parameters and variants', () => {
  it("AttnlabCaptures: 8 pointers, the captures' 8×4 index strides, 8 gradient pointers", () => {
    const table = Tensor.zeros([4, 39], 'float32');
    const one = Tensor.zeros([1, 5], 'int32');
    const arg = marshalCaptures(
      mods([
        { name: 'table', tensor: table, dtype: 'float32', needsGrad: true, strides: [39, 1, 0, 0] },
        { name: 'one', tensor: one, dtype: 'int32', needsGrad: false, strides: [0, 1, 0, 0] },
      ]),
      [7n],
      [1n, 2n],
    );
    assert.ok(arg.type === 'struct');
    assert.equal(arg.fields.length, 8 + 32 + 8);
    const strides = arg.fields.slice(8, 40).map((f) => f.value);
    assert.deepEqual(strides.slice(0, 4), [39, 1, 0, 0]);
    assert.deepEqual(strides.slice(4, 8), [0, 1, 0, 0]);
    assert.deepEqual(strides.slice(8), new Array(24).fill(0));
    assert.deepEqual(
      arg.fields.slice(0, 8).map((f) => f.value),
      [1n, 2n, 0n, 0n, 0n, 0n, 0n, 0n],
    );
    assert.deepEqual(
      arg.fields.slice(40).map((f) => f.value),
      [7n, 0n, 0n, 0n, 0n, 0n, 0n, 0n],
    );
  });

  it('AttnlabBlockMask: strides 0 where stored once, block counts from T and S', () => {
    const arg = marshalBlockMask({ kinds: { ptr: 5n }, Bm: 2, Nm: 1, blockQ: 128, blockKV: 64 }, 300, 129);
    assert.ok(arg.type === 'struct');
    assert.deepEqual(
      arg.fields.map((f) => f.value),
      [5n, 3 * 3, 0, 128, 64, 3, 3],
    );
    const per = marshalBlockMask({ kinds: { ptr: 5n }, Bm: 1, Nm: 4, blockQ: 128, blockKV: 128 }, 256, 256);
    assert.ok(per.type === 'struct');
    assert.deepEqual(
      per.fields.map((f) => f.value),
      [5n, 0, 4, 128, 128, 2, 2],
    );
  });

  it('the variant key names the modifier set and the block mask; only the block mask is a -D', () => {
    const blockMask = blockMaskFrom(
      { Bm: 1, Nm: 1, blockQ: 128, blockKV: 128 },
      { B: 2, N: 4, T: 16, S: 24 },
      Tensor.zeros([1, 1, 1, 1], 'bool'),
      '',
    );
    const p = { ...validateAttention(q, kv, kv), modifiers: mods(), blockMask };
    const v = flashVariant(p, 'sm_90a');
    assert.match(flashVariantKey(v), /\.mods-abc123\.bmask$/);
    assert.equal(flashDefines(v).ATTNLAB_BLOCK_MASK, 1);
    const plain = flashVariant(validateAttention(q, kv, kv), 'sm_90a');
    assert.doesNotMatch(flashVariantKey(plain), /mods|bmask/);
    assert.equal('ATTNLAB_BLOCK_MASK' in flashDefines(plain), false);
  });

  it('refuses block masks of the wrong batch/head count and too many captures, saying which', () => {
    const p = validateAttention(q, kv, kv);
    const bm = (Bm: number, Nm: number) => ({ kinds: { ptr: 1n }, Bm, Nm, blockQ: 128, blockKV: 128 });
    assert.equal(variantsRule({ ...p, blockMask: bm(2, 4) }), null);
    assert.equal(variantsRule({ ...p, blockMask: bm(1, 1) }), null);
    assert.match(variantsRule({ ...p, blockMask: bm(3, 1) }) ?? '', /block mask of 3×1.*B=2, N=4/);
    // A DeviceBuffer's device is its ordinal (on the GPU); a host Tensor's is 'cpu'.
    const onGpu = { ptr: 1n, device: 0 };
    assert.equal(variantsRule({ ...p, blockMask: { ...bm(1, 1), kinds: onGpu } }), null);
    const onHost = { buffer: { ptr: 1n }, device: 'cpu' };
    assert.match(
      variantsRule({ ...p, blockMask: { ...bm(1, 1), kinds: onHost } }) ?? '',
      /block mask on the cpu/,
    );
    const t = Tensor.zeros([4], 'float32');
    const nine = Array.from({ length: 9 }, (_, i) => ({
      name: `c${i}`,
      tensor: t,
      dtype: 'float32' as const,
      needsGrad: false,
      strides: NO_STRIDES,
    }));
    assert.match(variantsRule({ ...p, modifiers: mods(nine) }) ?? '', /9 captured tensors/);
    assert.match(variantsRule({ ...p, modifiers: mods(nine.slice(0, 1)) }) ?? '', /c0 is on the cpu/);
  });
});

describe('flash backward: bias, mask and modifier rules', () => {
  const dO = randomNormal([2, 16, 4, 64], { seed: 3, dtype: 'bfloat16' });
  const lse = Tensor.zeros([2, 16, 4], 'float32');
  const problem = (options: Parameters<typeof validateBackward>[6]) =>
    validateBackward(q, kv, kv, dO, lse, dO, options);

  it('takes a bias and a boolean mask on the wgmma loop on sm_90a, mma.sync elsewhere, keyed and specialised by them', () => {
    const bias = Tensor.zeros([1, 4, 16, 24], 'bfloat16');
    const mask = Tensor.zeros([2, 1, 16, 24], 'bool');
    const p = problem({ bias, mask });
    assert.deepEqual(flashBackwardRule(p), { ok: true });
    // H=64: a plain problem takes the producer-warpgroup loop there, which has no bias/mask hooks.
    const v = flashBackwardVariant(p, 'sm_90a');
    assert.equal(v.kernel, 'wgmma');
    assert.equal(flashBackwardFile(v), 'hopper/hopper_bwd.cu');
    // The hooks' loop keeps the plain dQ staging (the swizzle is for problems without hooks).
    assert.match(flashBackwardVariantKey(v), /\.wgmma\.bias-bf16\.mask$/);
    assert.deepEqual(flashBackwardDefines(v), { FLASH_D: 64, FLASH_FP16: 0, FLASH_BIAS: 2, FLASH_MASK: 1 });
    const a100 = flashBackwardVariant(p, 'sm_80');
    assert.equal(a100.kernel, 'mma');
    assert.match(flashBackwardVariantKey(a100), /128x64x8\.bias-bf16\.mask$/);
    assert.equal(flashBackwardDefines(a100).FLASH_BIAS, 2);
    assert.equal(flashBackwardDefines(a100).FLASH_MASK, 1);
    // S = 24: a row of the mask is no whole number of 16-byte loads, so the loop reads it byte by byte.
    assert.equal(v.maskRows, false);
    const rows = { ...v, maskRows: true };
    assert.match(flashBackwardVariantKey(rows), /\.bias-bf16\.mask-rows$/);
    assert.equal(flashBackwardDefines(rows).FLASH_MASK_ROWS, 1);
    assert.equal(flashBackwardDefines({ ...a100, maskRows: true }).FLASH_MASK_ROWS, 1);
    const plain = flashBackwardVariant(problem({}), 'sm_90a');
    assert.equal(plain.kernel, 'wgmma-ws');
    assert.equal('FLASH_BIAS' in flashBackwardDefines(plain), false);
  });

  it('stores dBias once an element on the wgmma loop where no bias element is shared (by default; ATTNLAB_FLASH_BWD_DBIAS=add keeps the float32 accumulator), zeroing it only where tiles are skipped', () => {
    // ATTNLAB_FLASH_BWD_DBIAS=add: the float32 reductions (66.1 ms against 43.1 stored, (B,N,T,S) on an H100).
    process.env.ATTNLAB_FLASH_BWD_DBIAS = 'add';
    reloadConfig();
    try {
      const added = flashBackwardVariant(
        problem({ bias: Tensor.zeros([2, 4, 16, 24], 'bfloat16') }),
        'sm_90a',
      );
      assert.equal(added.dbiasStore, false);
      assert.equal('FLASH_DBIAS_STORE' in flashBackwardDefines(added), false);
    } finally {
      delete process.env.ATTNLAB_FLASH_BWD_DBIAS;
      reloadConfig();
    }
    for (const value of [undefined, 'store']) {
      if (value === undefined) delete process.env.ATTNLAB_FLASH_BWD_DBIAS;
      else process.env.ATTNLAB_FLASH_BWD_DBIAS = value;
      reloadConfig();
      try {
        // (1,N,T,S) over B = 2: each element sums two positions, so the float32 reductions stay.
        const shared = flashBackwardVariant(
          problem({ bias: Tensor.zeros([1, 4, 16, 24], 'bfloat16') }),
          'sm_90a',
        );
        assert.equal(shared.dbiasStore, false);
        assert.equal('FLASH_DBIAS_STORE' in flashBackwardDefines(shared), false);
        for (const dtype of ['bfloat16', 'float32'] as const) {
          const full = problem({ bias: Tensor.zeros([2, 4, 16, 24], dtype) });
          const v = flashBackwardVariant(full, 'sm_90a');
          assert.equal(v.dbiasStore, true);
          assert.match(flashBackwardVariantKey(v), /\.bias-(bf16|f32)\.dbias-store$/);
          assert.equal(flashBackwardDefines(v).FLASH_DBIAS_STORE, 1);
          assert.equal(skipsTiles(full), false);
          // The mma.sync loop has no store form.
          const a100 = flashBackwardVariant(full, 'sm_80');
          assert.equal(a100.dbiasStore, false);
          assert.equal('FLASH_DBIAS_STORE' in flashBackwardDefines(a100), false);
        }
      } finally {
        delete process.env.ATTNLAB_FLASH_BWD_DBIAS;
        reloadConfig();
      }
    }
    const bias = Tensor.zeros([2, 4, 16, 24], 'bfloat16');
    assert.equal(skipsTiles(problem({ bias, isCausal: true })), true);
    assert.equal(skipsTiles(problem({ bias, localWindowSize: [4, 0] })), true);
    assert.equal(skipsTiles(problem({ bias, keyValueSeqLengths: [20, 24] })), true);
    assert.equal(skipsTiles(problem({ bias, mask: Tensor.zeros([2, 1, 16, 24], 'bool') })), false);
  });

  it('reads mask rows 16 bytes at a time only with contiguous keys and 16-byte multiples elsewhere', () => {
    // (B,1,T,S) contiguous, S = 8192; (1,1,1,S) key padding; (B,N,T,S) with S = 48.
    assert.equal(maskRowsFit([8192 * 8192, 0, 8192, 1]), true);
    assert.equal(maskRowsFit([0, 0, 0, 1]), true);
    assert.equal(maskRowsFit([4 * 64 * 48, 64 * 48, 48, 1]), true);
    // S = 24; keys strided (a transposed view); a batch stride of 8 bytes; no mask.
    assert.equal(maskRowsFit([16 * 24, 0, 24, 1]), false);
    assert.equal(maskRowsFit([0, 0, 1, 64]), false);
    assert.equal(maskRowsFit([8, 0, 0, 1]), false);
    assert.equal(maskRowsFit(null), false);
    // The problem's own strides decide it on the wgmma loop; the mma.sync loop never takes it.
    const mask = Tensor.zeros([2, 1, 16, 32], 'bool');
    const kv32 = randomNormal([2, 32, 2, 64], { seed: 2, dtype: 'bfloat16' });
    const p = validateBackward(q, kv32, kv32, dO, lse, dO, { mask });
    assert.equal(flashBackwardVariant(p, 'sm_90a').maskRows, true);
    assert.equal(flashBackwardVariant(p, 'sm_80').maskRows, false);
  });

  it('runs modifiers and block masks on the wgmma loop on sm_90a (never wgmma-ws), mma.sync when asked or elsewhere', () => {
    const blockMask = blockMaskFrom(
      { Bm: 1, Nm: 1, blockQ: 128, blockKV: 128 },
      { B: 2, N: 4, T: 16, S: 24 },
      Tensor.zeros([1, 1, 1, 1], 'bool'),
      '',
    );
    const p = { ...problem({}), modifiers: mods(), blockMask };
    const v = flashBackwardVariant(p, 'sm_90a');
    assert.equal(v.kernel, 'wgmma');
    assert.match(
      flashBackwardVariantKey(v),
      /^flash-bwd\.sm_90a\.bf16\.d64\.128x64x8\.wgmma\.mods-abc123\.bmask$/,
    );
    assert.deepEqual(flashBackwardDefines(v), {
      FLASH_D: 64,
      FLASH_FP16: 0,
      ATTNLAB_BLOCK_MASK: 1,
      ATTNLAB_FAST_TANH: 1,
    });
    // The mma.sync loop keeps libm's tanhf (it also runs where the forward is the mma.sync one).
    assert.equal('ATTNLAB_FAST_TANH' in flashBackwardDefines(flashBackwardVariant(p, 'sm_80')), false);
    // The gradient from P by default (and with ATTNLAB_FLASH_BWD_SCORE_GRAD=output), only where the generated
    // source gives it so (ATTNLAB_SCORE_MOD_GRAD_FROM_OUTPUT 1: softcap) and with a score modifier;
    // ATTNLAB_FLASH_BWD_SCORE_GRAD=score keeps the recomputed score.
    assert.equal(v.gradFromOutput, false);
    const fromOutput = {
      ...p,
      modifiers: mods([], '#define ATTNLAB_SCORE_MOD_GRAD_FROM_OUTPUT 1\n'),
    };
    for (const value of [undefined, 'output']) {
      if (value === undefined) delete process.env.ATTNLAB_FLASH_BWD_SCORE_GRAD;
      else process.env.ATTNLAB_FLASH_BWD_SCORE_GRAD = value;
      reloadConfig();
      try {
        const out = flashBackwardVariant(fromOutput, 'sm_90a');
        assert.equal(out.gradFromOutput, true);
        assert.match(flashBackwardVariantKey(out), /\.mods-abc123\.grad-out\.bmask$/);
        assert.equal(flashBackwardDefines(out).FLASH_BWD_GRAD_FROM_OUTPUT, 1);
        const maskOnly = { ...fromOutput, modifiers: { ...fromOutput.modifiers, hasScoreMod: false } };
        assert.equal(flashBackwardVariant(maskOnly, 'sm_90a').gradFromOutput, false);
        assert.equal(flashBackwardVariant(fromOutput, 'sm_80').gradFromOutput, false);
        const zero = { ...p, modifiers: mods([], '#define ATTNLAB_SCORE_MOD_GRAD_FROM_OUTPUT 0\n') };
        assert.equal(flashBackwardVariant(zero, 'sm_90a').gradFromOutput, false);
      } finally {
        delete process.env.ATTNLAB_FLASH_BWD_SCORE_GRAD;
        reloadConfig();
      }
    }
    process.env.ATTNLAB_FLASH_BWD_SCORE_GRAD = 'score';
    reloadConfig();
    try {
      assert.equal(flashBackwardVariant(fromOutput, 'sm_90a').gradFromOutput, false);
    } finally {
      delete process.env.ATTNLAB_FLASH_BWD_SCORE_GRAD;
      reloadConfig();
    }
    // The block mask's bit a step: 512 bytes more than the loop without one (232,448 in all at D=128).
    const unmasked = flashBackwardSharedBytes({ ...v, blockMask: false });
    assert.equal(flashBackwardSharedBytes(v).dkdv, unmasked.dkdv + 512);
    assert.equal(flashBackwardSharedBytes(v).dkdvOnly, unmasked.dkdvOnly + 512);
    assert.equal(flashBackwardSharedBytes({ ...v, headDim: 128 }).dkdv, 232448);
    assert.equal(flashBackwardVariant(p, 'sm_80').kernel, 'mma');
    // Deterministic: the wgmma loop's ordered dQ adds take modifiers, but a block mask's skipped steps
    // would leave a query block's turn unpassed, so with one the loop runs without dQ and the dQ pass follows.
    const det = { ...problem({ deterministic: true }), modifiers: mods() };
    const ordered = flashBackwardVariant(det, 'sm_90a');
    assert.equal(ordered.kernel, 'wgmma');
    assert.equal(orderedDqAdds(ordered), true);
    assert.equal(flashBackwardDefines(ordered).FLASH_BWD_DETERMINISTIC, 1);
    const passed = flashBackwardVariant({ ...det, blockMask }, 'sm_90a');
    assert.equal(passed.kernel, 'wgmma');
    assert.equal(orderedDqAdds(passed), false);
    assert.equal('FLASH_BWD_DETERMINISTIC' in flashBackwardDefines(passed), false);
    // ATTNLAB_FLASH_BWD_KERNEL names: wgmma-ws falls to wgmma for a general problem only; mma stays mma.
    for (const D of [64, 128]) {
      assert.equal(chooseFlashBackwardKernel(D, 'sm_90a', 'wgmma-ws', null, true), 'wgmma');
      assert.equal(chooseFlashBackwardKernel(D, 'sm_90a', 'wgmma-ws', null, false), 'wgmma-ws');
      assert.equal(chooseFlashBackwardKernel(D, 'sm_90a', 'mma', null, true), 'mma');
      assert.equal(chooseFlashBackwardKernel(D, 'sm_90a', null, null, true), 'wgmma');
    }
    // Padded 32 has no measured wgmma default; past 128 (without ATTNLAB_FLASH_BWD_WIDE) and off sm_90a there is
    // no wgmma loop.
    assert.equal(chooseFlashBackwardKernel(32, 'sm_90a', null, null, true), 'mma');
    assert.equal(chooseFlashBackwardKernel(160, 'sm_90a', 'wgmma', null, true), 'mma');
    assert.equal(chooseFlashBackwardKernel(128, 'sm_80', 'wgmma', null, true), 'mma');
  });

  it('deterministic: a bias each of whose elements sums one position only, not a broadcast one', () => {
    const full = Tensor.zeros([2, 4, 16, 24], 'float32');
    const heads = Tensor.zeros([2, 1, 16, 24], 'float32');
    assert.equal(biasContributors(problem({ bias: full })), 1);
    assert.equal(biasContributors(problem({ bias: heads })), 4);
    assert.deepEqual(flashBackwardRule(problem({ bias: full, deterministic: true })), { ok: true });
    const refused = flashBackwardRule(problem({ bias: heads, deterministic: true }));
    assert.ok(!refused.ok && /deterministic with a bias broadcast over 4/.test(refused.reason));
  });

  it('deterministic: refuses captures that need their gradient (float32 atomics)', () => {
    const t = Tensor.zeros([4], 'float32');
    const p = {
      ...problem({ deterministic: true }),
      modifiers: mods([{ name: 'table', tensor: t, dtype: 'float32', needsGrad: true, strides: NO_STRIDES }]),
    };
    const refused = flashBackwardRule(p);
    assert.ok(!refused.ok);
    assert.match(refused.reason, /table|cpu/);
  });
});

describe('the float64 modifier oracle against the reference given the same dense mask or bias', () => {
  const shape = { B: 1, T: 20, S: 20, N: 2, K: 1, H: 16 };
  const qs = randomNormal([1, 20, 2, 16], { seed: 4, dtype: 'float64' });
  const ks = randomNormal([1, 20, 1, 16], { seed: 5, dtype: 'float64' });
  const vs = randomNormal([1, 20, 1, 16], { seed: 6, dtype: 'float64' });
  const gs = randomNormal([1, 20, 2, 16], { seed: 7, dtype: 'float64' });
  const scale = 0.25;
  const reference = (options: Parameters<typeof attention>[3]) => {
    const f = attention(qs, ks, vs, {
      ...options,
      scale,
      implementation: 'reference',
      returnLogSumExp: true,
    });
    const g = attentionBackward(qs, ks, vs, f.output, f.logSumExp as Tensor, gs, {
      ...options,
      scale,
      implementation: 'reference',
    });
    return { f, g };
  };
  const close = (a: Float64Array, b: Float64Array, what: string) => {
    const worst = a.reduce((m, x, i) => Math.max(m, Math.abs(x - b[i])), 0);
    assert.ok(worst < 1e-9, `${what}: ${worst}`);
  };

  it('causal as maskMod = isCausal', () => {
    const m = modifierReference(causalCase(), qs, ks, vs, gs, scale);
    const { f, g } = reference({ isCausal: true });
    close(m.output, f.output.toFloat64Array(), 'output');
    close(m.dQuery, g.dQuery.toFloat64Array(), 'dQuery');
    close(m.dKey, g.dKey.toFloat64Array(), 'dKey');
    close(m.dValue, g.dValue.toFloat64Array(), 'dValue');
  });

  it("ALiBi = its dense bias with isCausal; a relative table's gradient = the dense bias gradient summed per diagonal", () => {
    const alibi = alibiCase(shape);
    const rel = relativeBiasCase(shape, 3);
    const dense = (c: typeof alibi) =>
      Tensor.fromArray(
        Array.from({ length: 2 * 20 * 20 }, (_, i) =>
          c.score!(0, 0, Math.floor(i / 400), Math.floor(i / 20) % 20, i % 20),
        ),
        [1, 2, 20, 20],
        'float64',
      );
    const ma = modifierReference(alibi, qs, ks, vs, gs, scale);
    const ra = reference({ bias: dense(alibi), isCausal: true });
    close(ma.output, ra.f.output.toFloat64Array(), 'ALiBi output');
    close(ma.dKey, ra.g.dKey.toFloat64Array(), 'ALiBi dKey');
    const mr = modifierReference(rel, qs, ks, vs, gs, scale);
    const rr = reference({ bias: dense(rel) });
    close(mr.dQuery, rr.g.dQuery.toFloat64Array(), 'relative dQuery');
    const dBias = rr.g.dBias!.toFloat64Array();
    const summed = new Float64Array(2 * 39);
    for (let i = 0; i < dBias.length; i++) {
      const h = Math.floor(i / 400);
      summed[h * 39 + (Math.floor(i / 20) % 20) - (i % 20) + 19] += dBias[i];
    }
    close(mr.dCaptures[0], summed, 'relative table gradient');
  });
});
