/**
 * The fused CUDA flash backward without a GPU: its support rule (what it refuses, with the reason),
 * its place in the backward table (cudnn > flash > naive on cuda), what a forced `flash` does with a
 * case it cannot run and where `auto` goes instead, and the variant/tiles/shared-memory arithmetic.
 * The kernels themselves run in test/gpu/backward/flash.test.ts.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { validateBackward } from '../../../../../../src/api/validate-backward.js';
import type { BackwardOptions, BackwardProblem } from '../../../../../../src/backends/backward-problem.js';
import {
  BACKWARD_BACKENDS,
  chooseBackwardBackend,
} from '../../../../../../src/backends/backward-registry.js';
import {
  chooseFlashBackwardKernel,
  chooseFlashBackwardTiles,
  FLASH_BACKWARD_TILES,
  flashBackwardDefines,
  flashBackwardDqWorkspaceBytes,
  flashBackwardFile,
  flashBackwardHeadDim,
  flashBackwardRule,
  flashBackwardSharedBytes,
  flashBackwardVariant,
  flashBackwardVariantKey,
  HOPPER_BACKWARD_DEFAULT_HEAD_DIMS,
  HOPPER_BACKWARD_DEFAULTS,
  HOPPER_BACKWARD_HEAD_DIMS,
  HOPPER_BACKWARD_PINGPONG_HEAD_DIMS,
  HOPPER_BACKWARD_TILES,
  HOPPER_BACKWARD_WIDE_HEAD_DIMS,
  HOPPER_BACKWARD_WIDE_TILES,
  HOPPER_BACKWARD_WS_TILES,
  hopperBackwardHeadDim,
  orderedDqAdds,
} from '../../../../../../src/backends/cuda/flash/sm80/backward-variant.js';
import { reloadConfig } from '../../../../../../src/config.js';
import { InvalidArgumentError, UnsupportedError } from '../../../../../../src/errors.js';
import type { FloatDType } from '../../../../../../src/tensor/dtype.js';
import { Tensor } from '../../../../../../src/tensor/tensor.js';

/** A validated host problem (B=2, T=40, S=56, N=4, K=2). */
interface ProblemShape {
  dtype?: FloatDType;
  H?: number;
  Hv?: number;
  lse?: FloatDType;
}

function problem(options: BackwardOptions = {}, shape: ProblemShape = {}): BackwardProblem {
  const { dtype = 'bfloat16', H = 64, lse = 'float32' } = shape;
  const Hv = shape.Hv ?? H;
  const q = Tensor.zeros([2, 40, 4, H], dtype);
  const k = Tensor.zeros([2, 56, 2, H], dtype);
  const v = Tensor.zeros([2, 56, 2, Hv], dtype);
  const o = Tensor.zeros([2, 40, 4, Hv], dtype);
  return validateBackward(q, k, v, o, Tensor.zeros([2, 40, 4], lse), o, options);
}

/** The same problem as the GPU would see it: a cuda device (only the rule runs, no GPU is touched). */
const onCuda = (p: BackwardProblem): BackwardProblem => ({ ...p, device: 'cuda' });

describe('flash (cuda) backward: support rule', () => {
  it('takes bf16/fp16 with causal, windows, lengths, GQA, H ≠ Hv up to 128', () => {
    for (const [options, shape] of [
      [{}, {}],
      [{ isCausal: true, causalAlignment: 'bottom_right' }, { dtype: 'float16' }],
      [{ localWindowSize: [8, 3] }, { H: 128 }],
      [
        { querySeqLengths: [40, 7], keyValueSeqLengths: [3, 56] },
        { H: 72, Hv: 32 },
      ],
      [
        { deterministic: true, isCausal: true },
        { H: 128, Hv: 128 },
      ],
      // A bias (dBias by float32 reductions) and a boolean mask, fused; deterministic where each
      // dBias element sums one position only.
      [{ bias: Tensor.zeros([1, 4, 40, 56], 'bfloat16') }, {}],
      [{ bias: Tensor.zeros([2, 4, 40, 56], 'float32'), deterministic: true }, {}],
      [{ mask: Tensor.fromRaw(new Uint8Array(40 * 56).fill(1), [1, 1, 40, 56], 'bool') }, {}],
    ] as const) {
      assert.deepEqual(flashBackwardRule(problem(options as BackwardOptions, shape)), { ok: true });
    }
  });

  it('refuses what the kernels do not do, saying why', () => {
    const cases: Array<[BackwardProblem, RegExp]> = [
      [problem({}, { dtype: 'float32' }), /dtype float32.*bfloat16 or float16/],
      [
        problem({ bias: Tensor.zeros([1, 4, 40, 56], 'bfloat16'), deterministic: true }),
        /deterministic with a bias broadcast over 2 .*dBias/,
      ],
      [problem({}, { H: 256 }), /H=256, Hv=256.*at most 128/],
      [problem({}, { H: 64, Hv: 160 }), /Hv=160/],
      [problem({}, { H: 60 }), /multiples of 8/],
      [problem({}, { lse: 'float64' }), /logSumExp float64/],
    ];
    for (const [p, reason] of cases) {
      const support = flashBackwardRule(p);
      assert.equal(support.ok, false);
      assert.match((support as { reason: string }).reason, reason);
    }
  });
});

/**
 * `fn` with the backward's switches that are on by default turned off (the layouts and keys of the loops
 * without them), plus `extra`; the environment restored after.
 */
function withSwitches<R>(extra: Record<string, string | undefined>, fn: () => R): R {
  const vars: Record<string, string | undefined> = {
    ATTNLAB_FLASH_BWD_WS_FLAGGED: '0',
    ATTNLAB_FLASH_BWD_DQ_SWIZZLE: '0',
    ATTNLAB_FLASH_BWD_STATS_EARLY: '0',
    ATTNLAB_FLASH_BWD_PINGPONG: '0',
    ...extra,
  };
  const saved = Object.fromEntries(Object.keys(vars).map((name) => [name, process.env[name]]));
  try {
    for (const [name, value] of Object.entries(vars)) {
      if (value === undefined) delete process.env[name];
      else process.env[name] = value;
    }
    reloadConfig();
    return fn();
  } finally {
    for (const [name, value] of Object.entries(saved)) {
      if (value === undefined) delete process.env[name];
      else process.env[name] = value;
    }
    reloadConfig();
  }
}

describe('flash (cuda) backward: dispatch', () => {
  it('sits between cudnn and naive in the cuda rows of the backward table', () => {
    const cuda = BACKWARD_BACKENDS.filter((b) => b.device === 'cuda').map((b) => b.name);
    assert.deepEqual(cuda, ['cudnn', 'flash', 'naive']);
  });

  // A bias broadcast over the batch, deterministic: dBias would sum 2 positions per element by atomics.
  const broadcastBias = { bias: Tensor.zeros([1, 4, 40, 56], 'bfloat16'), deterministic: true };

  it('forced on a case it cannot run: UnsupportedError with the reason, no fallback', () => {
    const p = onCuda(problem({ implementation: 'flash', ...broadcastBias }));
    assert.throws(
      () => chooseBackwardBackend(p),
      (e: unknown) =>
        e instanceof UnsupportedError && /flash \(cuda\) backward/.test(e.message) && /dBias/.test(e.reason),
    );
  });

  it('auto: a case flash refuses is offered to the next backend (its reason is listed, naive is asked)', () => {
    const p = onCuda(problem(broadcastBias));
    // Without a GPU every cuda backend refuses; the error lists them in the order they were asked.
    try {
      const chosen = chooseBackwardBackend(p);
      assert.notEqual(chosen.backend.name, 'flash'); // a GPU machine: cudnn or naive take the case
    } catch (error) {
      assert.ok(error instanceof UnsupportedError);
      const order = ['cudnn:', 'flash: deterministic with a bias', 'naive:'].map((s) =>
        error.reason.indexOf(s),
      );
      assert.ok(
        order.every((at, i) => at >= 0 && (i === 0 || at > order[i - 1])),
        error.reason,
      );
    }
  });
});

describe('flash (cuda) backward: variant and tiles', () => {
  it('pads the head dim to a multiple of 32 (the dQ product splits D over 2 warps in 16-column steps)', () => {
    assert.deepEqual(
      [
        [32, 32],
        [40, 40],
        [64, 64],
        [72, 32],
        [96, 96],
        [112, 128],
        [128, 64],
      ].map(([H, Hv]) => flashBackwardHeadDim(H, Hv)),
      [32, 64, 64, 96, 96, 128, 128],
    );
  });

  it('names the variant by arch, dtype, head dim, tiles and the deterministic pass', () => {
    // On sm_90a a padded D=128 takes the producer-warpgroup wgmma loop (v6/v7, `.lean`) by default, with the
    // flagged clean, early statistics and swizzled dQ staging; elsewhere the mma.sync one.
    const v = flashBackwardVariant(problem({ deterministic: true }, { dtype: 'float16', H: 128 }), 'sm_90a');
    assert.equal(
      flashBackwardVariantKey(v),
      'flash-bwd.sm_90a.f16.d128.128x64x12.lean.wgmma.ws.flagged.early.dqswz.det',
    );
    const a100 = flashBackwardVariant(
      problem({ deterministic: true }, { dtype: 'float16', H: 128 }),
      'sm_80',
    );
    assert.equal(flashBackwardVariantKey(a100), 'flash-bwd.sm_80.f16.d128.128x64x8.det');
    const fast = flashBackwardVariant(problem({}, { H: 64 }), 'sm_80');
    assert.equal(flashBackwardVariantKey(fast), 'flash-bwd.sm_80.bf16.d64.128x64x8');
  });

  it('ATTNLAB_FLASH_BWD_TILES overrides the tiles within the kernel shape rules, and says them otherwise', () => {
    assert.deepEqual(chooseFlashBackwardTiles(128, null), FLASH_BACKWARD_TILES);
    assert.deepEqual(chooseFlashBackwardTiles(64, '128x128x8'), { keys: 128, queries: 128, warps: 8 });
    assert.deepEqual(chooseFlashBackwardTiles(128, ' 64x64x4 '), { keys: 64, queries: 64, warps: 4 });
    assert.deepEqual(chooseFlashBackwardTiles(32, '128x64x8'), { keys: 128, queries: 64, warps: 8 });
    // keys ≠ 16·warps; 48 queries = 3 m-tiles do not divide 8 warps; D=96 over 4 parts is 24 columns; text.
    for (const [D, text] of [
      [128, '100x64x8'],
      [128, '128x48x8'],
      [96, '128x32x8'],
      [64, 'big'],
    ] as const) {
      assert.throws(
        () => chooseFlashBackwardTiles(D, text),
        (e: unknown) => e instanceof InvalidArgumentError && /ATTNLAB_FLASH_BWD_TILES/.test(e.message),
        `${D} ${text}`,
      );
    }
  });

  it('runs the wgmma dK/dV loop only on sm_90a up to D=128, when asked (or by default where verified)', () =>
    withSwitches({ ATTNLAB_FLASH_BWD_WIDE: '0' }, () => {
      for (const D of HOPPER_BACKWARD_HEAD_DIMS) {
        assert.equal(chooseFlashBackwardKernel(D, 'sm_90a', 'wgmma', null), 'wgmma');
        assert.equal(chooseFlashBackwardKernel(D, 'sm_90a', 'mma', null), 'mma');
        // Unset: the measured table's loop (HOPPER_BACKWARD_DEFAULTS).
        assert.equal(
          chooseFlashBackwardKernel(D, 'sm_90a', null, null),
          HOPPER_BACKWARD_DEFAULTS[D] ?? 'mma',
        );
      }
      // The H100 timings: the producer-warpgroup loop at D=64, 96 (the 128-column module) and 128; a problem
      // with hooks (general) on the 256-thread loop, which has them.
      assert.deepEqual(
        [32, 64, 96, 128].map((D) => chooseFlashBackwardKernel(D, 'sm_90a', null, null)),
        ['mma', 'wgmma-ws', 'wgmma-ws', 'wgmma-ws'],
      );
      assert.equal(chooseFlashBackwardKernel(128, 'sm_90a', null, null, true), 'wgmma');
      assert.deepEqual(HOPPER_BACKWARD_DEFAULT_HEAD_DIMS, [64, 96, 128]);
      // mma.sync tiles asked for, another head dim, another GPU: the mma.sync loop.
      assert.equal(chooseFlashBackwardKernel(128, 'sm_90a', 'wgmma', '128x32x8'), 'mma');
      // D = 32 and 96 run the 64- and 128-column module when asked for; past 128 never.
      for (const D of [32, 96]) assert.equal(chooseFlashBackwardKernel(D, 'sm_90a', 'wgmma', null), 'wgmma');
      assert.equal(chooseFlashBackwardKernel(160, 'sm_90a', 'wgmma', null), 'mma');
      assert.deepEqual(
        [32, 64, 96, 128, 160].map((D) => hopperBackwardHeadDim(D, false)),
        [64, 64, 128, 128, null],
      );
      // The producer-warpgroup loop when asked for, the 128-column module on 12 warps.
      assert.equal(chooseFlashBackwardKernel(96, 'sm_90a', 'wgmma-ws', null), 'wgmma-ws');
      assert.equal(chooseFlashBackwardKernel(128, 'sm_80', 'wgmma-ws', null), 'mma');
      const ws = { ...flashBackwardVariant(problem({}, { H: 128 }), 'sm_90a'), kernel: 'wgmma-ws' as const };
      const wsKey = flashBackwardVariantKey({ ...ws, tiles: HOPPER_BACKWARD_WS_TILES });
      assert.equal(wsKey, 'flash-bwd.sm_90a.bf16.d128.128x64x12.lean.wgmma.ws');
      assert.deepEqual(flashBackwardDefines(ws), {
        FLASH_D: 128,
        FLASH_FP16: 0,
        FLASH_BWD_WS: 1,
        FLASH_BWD_LEAN: 1,
      });
      assert.equal(flashBackwardFile(ws), 'hopper/hopper_bwd.cu');
      assert.equal(chooseFlashBackwardKernel(128, 'sm_80', 'wgmma', null), 'mma');
      assert.equal(chooseFlashBackwardKernel(64, 'sm_80', 'wgmma', null), 'mma');
      const v = {
        ...flashBackwardVariant(problem({}, { H: 128 }), 'sm_90a'),
        kernel: 'wgmma' as const,
        tiles: HOPPER_BACKWARD_TILES,
      };
      assert.equal(flashBackwardVariantKey(v), 'flash-bwd.sm_90a.bf16.d128.128x64x8.lean.wgmma');
      assert.equal(flashBackwardFile(v), 'hopper/hopper_bwd.cu');
      assert.deepEqual(flashBackwardDefines(v), { FLASH_D: 128, FLASH_FP16: 0, FLASH_BWD_LEAN: 1 });
      // 1 KiB slack + K, V (2 × 128 × 256) + 3 stages of Q, dO (2 × 64 × 256) + 3 × lse2, D (2 × 64 × 4);
      // with dQ, 2 dS (64 × 128 × 2) and the float32 dQ staging (64 × 128 × 4).
      const bytes = flashBackwardSharedBytes(v);
      assert.equal(bytes.dkdvOnly, 1024 + 65536 + 3 * 32768 + 3 * 512);
      assert.equal(bytes.dkdv, bytes.dkdvOnly + 2 * 16384 + 32768);
      assert.ok(bytes.dkdv <= 227 * 1024);
      // wgmma-ws: 6 mbarriers of the stages, K/V's, 3 flags; still inside the 232,448 bytes.
      const wsBytes = flashBackwardSharedBytes({ ...v, kernel: 'wgmma-ws' });
      assert.equal(wsBytes.dkdv, bytes.dkdv + 68);
      assert.ok(wsBytes.dkdv <= 232448);
      // D=64: K, V (2 × 128 × 128) + 3 stages of 2 × 64 × 128 + the statistics, the same 2 dS, a 16 KiB staging.
      const v64 = {
        ...flashBackwardVariant(problem({}, { H: 64 }), 'sm_90a'),
        kernel: 'wgmma' as const,
        tiles: HOPPER_BACKWARD_TILES,
      };
      assert.equal(flashBackwardVariantKey(v64), 'flash-bwd.sm_90a.bf16.d64.128x64x8.lean.wgmma');
      const bytes64 = flashBackwardSharedBytes(v64);
      assert.equal(bytes64.dkdvOnly, 1024 + 32768 + 3 * 16384 + 3 * 512);
      assert.equal(bytes64.dkdv, bytes64.dkdvOnly + 2 * 16384 + 16384);
      // The dQ workspace: the bulk-reduce layout covers whole padded query blocks and both head-dim boxes.
      const shape = { B: 2, T: 100, N: 3, H: 64 };
      assert.equal(flashBackwardDqWorkspaceBytes(v64, shape, 128), 2 * 3 * 128 * 64 * 4);
      assert.equal(flashBackwardDqWorkspaceBytes(v, shape, 128), 2 * 3 * 128 * 128 * 4);
      const mma = flashBackwardVariant(problem({}, { H: 64 }), 'sm_80');
      assert.equal(flashBackwardDqWorkspaceBytes(mma, shape, 128), 2 * 100 * 3 * 64 * 4);
      assert.equal(flashBackwardDqWorkspaceBytes({ ...mma, deterministic: true }, shape, 128), 0);
      // Deterministic on the wgmma loops: the same workspace, then an int32 semaphore per (b·N + n, 64-row
      // query block) for the ordered dQ adds, compiled in by FLASH_BWD_DETERMINISTIC.
      const det = { ...v, deterministic: true };
      assert.equal(flashBackwardDqWorkspaceBytes(det, shape, 128), 2 * 3 * 128 * 128 * 4 + 2 * 3 * 2 * 4);
      assert.deepEqual(flashBackwardDefines(det), {
        FLASH_D: 128,
        FLASH_FP16: 0,
        FLASH_BWD_DETERMINISTIC: 1,
        FLASH_BWD_LEAN: 1,
      });
      assert.equal(flashBackwardVariantKey(det), 'flash-bwd.sm_90a.bf16.d128.128x64x8.lean.wgmma.det');
      assert.deepEqual(flashBackwardDefines({ ...ws, deterministic: true }), {
        FLASH_D: 128,
        FLASH_FP16: 0,
        FLASH_BWD_WS: 1,
        FLASH_BWD_DETERMINISTIC: 1,
        FLASH_BWD_LEAN: 1,
      });
      assert.equal('FLASH_BWD_DETERMINISTIC' in flashBackwardDefines({ ...mma, deterministic: true }), false);
      // A block mask's walk skips steps, which the order cannot take: the loop without dQ and the dQ pass.
      const masked = { ...det, blockMask: true };
      assert.equal(orderedDqAdds(masked), false);
      assert.equal('FLASH_BWD_DETERMINISTIC' in flashBackwardDefines(masked), false);
      assert.equal(flashBackwardDqWorkspaceBytes(masked, shape, 128), 0);
      assert.equal(orderedDqAdds(det), true);
      // ATTNLAB_FLASH_BWD_DET=pass: the same loop through the dQ pass, named so.
      const pass = { ...det, dqPass: true };
      assert.equal(orderedDqAdds(pass), false);
      assert.equal(flashBackwardDqWorkspaceBytes(pass, shape, 128), 0);
      assert.equal(flashBackwardVariantKey(pass), 'flash-bwd.sm_90a.bf16.d128.128x64x8.lean.wgmma.det.pass');
    }));

  it('builds the wgmma loops lean (v6/v7) by default, the previous code with ATTNLAB_FLASH_BWD_LEAN=0', () =>
    withSwitches({ ATTNLAB_FLASH_BWD_KERNEL: 'wgmma' }, () => {
      const saved = process.env.ATTNLAB_FLASH_BWD_LEAN;
      try {
        delete process.env.ATTNLAB_FLASH_BWD_LEAN;
        reloadConfig();
        const lean = flashBackwardVariant(problem({}, { H: 128 }), 'sm_90a');
        assert.equal(lean.lean, true);
        assert.equal(flashBackwardVariantKey(lean), 'flash-bwd.sm_90a.bf16.d128.128x64x8.lean.wgmma');
        // A bias (like a mask, modifiers or a block mask) keeps the general code either way: no `.lean`.
        const biased = flashBackwardVariant(
          problem({ bias: Tensor.zeros([1, 4, 40, 56], 'bfloat16') }, { H: 128 }),
          'sm_90a',
        );
        assert.equal(biased.lean, false);
        assert.equal('FLASH_BWD_LEAN' in flashBackwardDefines(biased), false);
        // mma.sync has no lean code.
        assert.equal(flashBackwardVariant(problem({}, { H: 128 }), 'sm_80').lean, false);
        process.env.ATTNLAB_FLASH_BWD_LEAN = '0';
        reloadConfig();
        const old = flashBackwardVariant(problem({}, { H: 128 }), 'sm_90a');
        assert.equal(flashBackwardVariantKey(old), 'flash-bwd.sm_90a.bf16.d128.128x64x8.wgmma');
        assert.deepEqual(flashBackwardDefines(old), { FLASH_D: 128, FLASH_FP16: 0 });
      } finally {
        if (saved === undefined) delete process.env.ATTNLAB_FLASH_BWD_LEAN;
        else process.env.ATTNLAB_FLASH_BWD_LEAN = saved;
        reloadConfig();
      }
    }));

  it('takes head dims past 128 on sm_90a only with ATTNLAB_FLASH_BWD_WIDE=1, on the 64-key loop, without hooks', () => {
    const saved = process.env.ATTNLAB_FLASH_BWD_WIDE;
    try {
      // Unset (the default) or 0: past 128 refused, the reason naming the switch.
      for (const value of [undefined, '0']) {
        if (value === undefined) delete process.env.ATTNLAB_FLASH_BWD_WIDE;
        else process.env.ATTNLAB_FLASH_BWD_WIDE = value;
        reloadConfig();
        const off = flashBackwardRule(problem({}, { H: 256 }));
        assert.equal(off.ok, false);
        assert.match(off.ok ? '' : off.reason, /H=256, Hv=256.*at most 128.*ATTNLAB_FLASH_BWD_WIDE=1/);
      }
      process.env.ATTNLAB_FLASH_BWD_WIDE = '1';
      reloadConfig();
      assert.deepEqual(
        [128, 160, 192, 224, 256, 288].map((D) => hopperBackwardHeadDim(D, true)),
        [128, 192, 192, 256, 256, null],
      );
      assert.deepEqual(HOPPER_BACKWARD_WIDE_HEAD_DIMS, [192, 256]);
      for (const [H, Hv, D, staging] of [
        [256, 256, 256, 0],
        [192, 192, 192, 2 * 64 * 64 * 4],
        [160, 136, 192, 2 * 64 * 64 * 4],
        [128, 256, 256, 0],
        [200, 64, 256, 0],
      ] as const) {
        const p = problem({}, { H, Hv });
        assert.equal(flashBackwardRule(p).ok, true, `H=${H} Hv=${Hv}`);
        const v = flashBackwardVariant(p, 'sm_90a');
        assert.equal(v.kernel, 'wgmma');
        assert.equal(v.headDim, D);
        assert.deepEqual(v.tiles, HOPPER_BACKWARD_WIDE_TILES);
        assert.equal(v.lean, false);
        assert.equal(flashBackwardVariantKey(v), `flash-bwd.sm_90a.bf16.d${D}.64x64x8.wgmma`);
        assert.deepEqual(flashBackwardDefines(v), { FLASH_D: D, FLASH_FP16: 0 });
        // 1 KiB + K, V (2 × 64 × 2D) + 2 stages of Q, dO (2 × 2 × 64 × 2D) + Pᵀ, dSᵀ (2 × 8 KiB) + the
        // staging at D=192 + 2 × (lse2, D); no dQ pass.
        const bytes = flashBackwardSharedBytes(v);
        assert.equal(bytes.dkdv, 1024 + 2 * 64 * 2 * D + 4 * 64 * 2 * D + 16384 + staging + 1024);
        assert.equal(bytes.dkdvOnly, bytes.dkdv);
        assert.equal(bytes.dq, 0);
        assert.ok(bytes.dkdv <= 227 * 1024);
        // The workspace: t_pad × D floats a head, the semaphores after it when deterministic.
        const det = flashBackwardVariant(problem({ deterministic: true }, { H, Hv }), 'sm_90a');
        assert.equal(orderedDqAdds(det), true);
        assert.equal(
          flashBackwardDqWorkspaceBytes(det, { B: 2, T: 40, N: 4, H }, 128),
          2 * 4 * 128 * D * 4 + 2 * 4 * 2 * 4,
        );
      }
      // =pair: both dQ passes in flight, `.pair`, 8 KiB more staging a warpgroup at D=192.
      process.env.ATTNLAB_FLASH_BWD_WIDE = 'pair';
      reloadConfig();
      for (const D of [192, 256]) {
        const v = flashBackwardVariant(problem({}, { H: D }), 'sm_90a');
        assert.equal(flashBackwardVariantKey(v), `flash-bwd.sm_90a.bf16.d${D}.64x64x8.wgmma.pair`);
        assert.deepEqual(flashBackwardDefines(v), { FLASH_D: D, FLASH_FP16: 0, FLASH_BWD_WIDE_PAIR: 1 });
        const staging = D === 192 ? 2 * 64 * (64 + 32) * 4 : 0;
        assert.equal(flashBackwardSharedBytes(v).dkdv, 1024 + 6 * 64 * 2 * D + 16384 + staging + 1024);
        assert.ok(flashBackwardSharedBytes(v).dkdv <= 227 * 1024);
      }
      // =halves: the pair form with dV, dK over a warpgroup's own queries early, the same shared memory.
      process.env.ATTNLAB_FLASH_BWD_WIDE = 'halves';
      reloadConfig();
      const halves = flashBackwardVariant(problem({ deterministic: true }, { H: 192 }), 'sm_90a');
      assert.equal(
        flashBackwardVariantKey(halves),
        'flash-bwd.sm_90a.bf16.d192.64x64x8.wgmma.pair.halves.det',
      );
      assert.deepEqual(flashBackwardDefines(halves), {
        FLASH_D: 192,
        FLASH_FP16: 0,
        FLASH_BWD_DETERMINISTIC: 1,
        FLASH_BWD_WIDE_PAIR: 1,
        FLASH_BWD_WIDE_HALVES: 1,
      });
      assert.equal(
        flashBackwardSharedBytes(halves).dkdv,
        1024 + 6 * 64 * 2 * 192 + 16384 + 2 * 64 * 96 * 4 + 1024,
      );
      // H ≤ 128 is untouched by the switch.
      assert.equal(flashBackwardVariant(problem({}, { H: 128 }), 'sm_90a').widePair, undefined);
      process.env.ATTNLAB_FLASH_BWD_WIDE = '1';
      reloadConfig();
      // Another GPU: the mma.sync loop, which the launcher refuses past 128.
      const a100 = flashBackwardVariant(problem({}, { H: 256 }), 'sm_80');
      assert.equal(a100.kernel, 'mma');
      assert.equal(a100.headDim, 256);
      // What the loop has no hooks for, refused by name: never a wrong result.
      for (const [options, why] of [
        [{ bias: Tensor.zeros([1, 4, 40, 56], 'bfloat16') }, /bias, a boolean mask/],
        [{ mask: Tensor.zeros([1, 1, 40, 56], 'bool') }, /bias, a boolean mask/],
      ] as const) {
        const r = flashBackwardRule(problem(options as BackwardOptions, { H: 192 }));
        assert.equal(r.ok, false);
        assert.match(r.ok ? '' : r.reason, why);
      }
      process.env.ATTNLAB_FLASH_BWD_DET = 'pass';
      reloadConfig();
      const pass = flashBackwardRule(problem({ deterministic: true }, { H: 256 }));
      assert.match(pass.ok ? '' : pass.reason, /ATTNLAB_FLASH_BWD_DET=pass: the dQ pass takes at most 128/);
      delete process.env.ATTNLAB_FLASH_BWD_DET;
      process.env.ATTNLAB_FLASH_BWD_KERNEL = 'mma';
      reloadConfig();
      const mma = flashBackwardRule(problem({}, { H: 256 }));
      assert.match(mma.ok ? '' : mma.reason, /ATTNLAB_FLASH_BWD_KERNEL=mma/);
      delete process.env.ATTNLAB_FLASH_BWD_KERNEL;
      // Past 256 refused even with the switch.
      reloadConfig();
      assert.equal(flashBackwardRule(problem({}, { H: 264 })).ok, false);
    } finally {
      delete process.env.ATTNLAB_FLASH_BWD_DET;
      delete process.env.ATTNLAB_FLASH_BWD_KERNEL;
      if (saved === undefined) delete process.env.ATTNLAB_FLASH_BWD_WIDE;
      else process.env.ATTNLAB_FLASH_BWD_WIDE = saved;
      reloadConfig();
    }
  });

  it('splits wgmma-ws dQ by keys at D=64 unset, with ATTNLAB_FLASH_BWD_PINGPONG=1|keys anywhere, never deterministic', () =>
    withSwitches({ ATTNLAB_FLASH_BWD_KERNEL: 'wgmma-ws', ATTNLAB_FLASH_BWD_PINGPONG: undefined }, () => {
      // Unset: HOPPER_BACKWARD_PINGPONG_HEAD_DIMS (the warpgroups' turns at D=64, where it measured faster).
      assert.deepEqual(HOPPER_BACKWARD_PINGPONG_HEAD_DIMS, [64]);
      assert.equal(flashBackwardVariant(problem({}, { H: 64 }), 'sm_90a').pingpong, 'turns');
      assert.equal(flashBackwardVariant(problem({}, { H: 128 }), 'sm_90a').pingpong, undefined);
      process.env.ATTNLAB_FLASH_BWD_PINGPONG = '0';
      reloadConfig();
      const plain = flashBackwardVariant(problem({}, { H: 64 }), 'sm_90a');
      assert.equal(plain.pingpong, undefined);
      assert.equal('FLASH_BWD_PINGPONG' in flashBackwardDefines(plain), false);
      for (const [value, mode, name, define] of [
        ['1', 'turns', 'pp', 1],
        ['keys', 'keys', 'dqkeys', 2],
      ] as const) {
        process.env.ATTNLAB_FLASH_BWD_PINGPONG = value;
        reloadConfig();
        const v = flashBackwardVariant(problem({}, { H: 64 }), 'sm_90a');
        assert.equal(v.pingpong, mode);
        assert.equal(flashBackwardVariantKey(v), `flash-bwd.sm_90a.bf16.d64.128x64x12.lean.wgmma.ws.${name}`);
        assert.equal(flashBackwardDefines(v).FLASH_BWD_PINGPONG, define);
        // At D=64 each warpgroup stages a 64-column pass (both halves): 16 KiB more than the halves' 16.
        assert.equal(flashBackwardSharedBytes(v).dkdv - flashBackwardSharedBytes(plain).dkdv, 64 * 64 * 4);
        // D=128: a pass is a half, the same staging.
        const wide = flashBackwardVariant(problem({}, { H: 128 }), 'sm_90a');
        assert.equal(wide.pingpong, mode);
        assert.equal(
          flashBackwardSharedBytes(wide).dkdv,
          1024 + 65536 + 3 * 32768 + 2 * 16384 + 32768 + 1536 + 68,
        );
        // The ordered dQ adds need one adding warp an element; the 256-thread loop has no split; nor has a
        // problem with hooks (it runs the 256-thread loop).
        assert.equal(
          flashBackwardVariant(problem({ deterministic: true }, { H: 64 }), 'sm_90a').pingpong,
          undefined,
        );
        const biased = problem({ bias: Tensor.zeros([1, 4, 40, 56], 'bfloat16') }, { H: 64 });
        assert.equal(flashBackwardVariant(biased, 'sm_90a').pingpong, undefined);
        process.env.ATTNLAB_FLASH_BWD_KERNEL = 'wgmma';
        reloadConfig();
        assert.equal(flashBackwardVariant(problem({}, { H: 64 }), 'sm_90a').pingpong, undefined);
        process.env.ATTNLAB_FLASH_BWD_KERNEL = 'wgmma-ws';
      }
      process.env.ATTNLAB_FLASH_BWD_PINGPONG = 'on';
      assert.throws(() => reloadConfig(), /ATTNLAB_FLASH_BWD_PINGPONG/);
      process.env.ATTNLAB_FLASH_BWD_PINGPONG = '0';
    }));

  it('the flagged clean, the dQ swizzle and the early statistics: on unset, named, compiled in, off with =0', () => {
    const names = [
      'ATTNLAB_FLASH_BWD_KERNEL',
      'ATTNLAB_FLASH_BWD_WS_FLAGGED',
      'ATTNLAB_FLASH_BWD_DQ_SWIZZLE',
      'ATTNLAB_FLASH_BWD_STATS_EARLY',
      'ATTNLAB_FLASH_BWD_PINGPONG',
    ];
    const saved = names.map((name) => process.env[name]);
    try {
      for (const name of names) delete process.env[name];
      reloadConfig();
      // Unset: D=128 on the producer-warpgroup loop with all three; D=64 with the ping-pong too.
      const v128 = flashBackwardVariant(problem({}, { H: 128 }), 'sm_90a');
      assert.equal(
        flashBackwardVariantKey(v128),
        'flash-bwd.sm_90a.bf16.d128.128x64x12.lean.wgmma.ws.flagged.early.dqswz',
      );
      assert.deepEqual(flashBackwardDefines(v128), {
        FLASH_D: 128,
        FLASH_FP16: 0,
        FLASH_BWD_WS: 1,
        FLASH_BWD_LEAN: 1,
        FLASH_BWD_WS_FLAGGED: 1,
        FLASH_BWD_DQ_SWIZZLE: 1,
        FLASH_BWD_STATS_EARLY: 1,
      });
      const v64 = flashBackwardVariant(problem({}, { H: 64 }), 'sm_90a');
      assert.equal(
        flashBackwardVariantKey(v64),
        'flash-bwd.sm_90a.bf16.d64.128x64x12.lean.wgmma.ws.pp.flagged.early.dqswz',
      );
      // A bias runs the 256-thread loop without the switches: no producer to flag, the early statistics in lean
      // modules only, the swizzle not yet GPU-run with hooks.
      const biased = flashBackwardVariant(
        problem({ bias: Tensor.zeros([1, 4, 40, 56], 'bfloat16') }, { H: 128 }),
        'sm_90a',
      );
      assert.equal(biased.kernel, 'wgmma');
      assert.equal(biased.dqSwizzle, undefined);
      assert.equal(biased.wsFlagged, undefined);
      assert.equal(biased.statsEarly, undefined);
      process.env.ATTNLAB_FLASH_BWD_KERNEL = 'wgmma';
      reloadConfig();
      const v = flashBackwardVariant(problem({}, { H: 128 }), 'sm_90a');
      assert.equal(flashBackwardVariantKey(v), 'flash-bwd.sm_90a.bf16.d128.128x64x8.lean.wgmma.early.dqswz');
      assert.equal(flashBackwardDefines(v).FLASH_BWD_STATS_EARLY, 1);
      const det = flashBackwardVariant(problem({ deterministic: true }, { H: 128 }), 'sm_90a');
      assert.equal(
        flashBackwardVariantKey(det),
        'flash-bwd.sm_90a.bf16.d128.128x64x8.lean.wgmma.early.dqswz.det',
      );
      // =0 each: the loops without them.
      for (const name of names.slice(1)) process.env[name] = '0';
      reloadConfig();
      const off = flashBackwardVariant(problem({}, { H: 128 }), 'sm_90a');
      assert.equal(flashBackwardVariantKey(off), 'flash-bwd.sm_90a.bf16.d128.128x64x8.lean.wgmma');
      assert.deepEqual(flashBackwardDefines(off), { FLASH_D: 128, FLASH_FP16: 0, FLASH_BWD_LEAN: 1 });
      delete process.env.ATTNLAB_FLASH_BWD_KERNEL;
      reloadConfig();
      const wsOff = flashBackwardVariant(problem({}, { H: 64 }), 'sm_90a');
      assert.equal(flashBackwardVariantKey(wsOff), 'flash-bwd.sm_90a.bf16.d64.128x64x12.lean.wgmma.ws');
      // mma.sync has none of them.
      for (const name of names) delete process.env[name];
      reloadConfig();
      const mma = flashBackwardVariant(problem({}, { H: 128 }), 'sm_80');
      assert.equal(mma.wsFlagged, undefined);
      assert.equal(mma.dqSwizzle, undefined);
      assert.equal(mma.statsEarly, undefined);
      process.env.ATTNLAB_FLASH_BWD_DQ_SWIZZLE = 'yes';
      assert.throws(() => reloadConfig(), /ATTNLAB_FLASH_BWD_DQ_SWIZZLE/);
    } finally {
      names.forEach((name, i) => {
        if (saved[i] === undefined) delete process.env[name];
        else process.env[name] = saved[i];
      });
      reloadConfig();
    }
  });

  it('fits every head dim of the mma.sync loop in an A100 block (163 KiB), so also in an H100/H200 one', () => {
    for (let D = 32; D <= 128; D += 32) {
      const v = flashBackwardVariant(problem({}, { H: D }), 'sm_80');
      const s = flashBackwardSharedBytes(v);
      assert.ok(Math.max(s.dkdv, s.dq) <= 163 * 1024, `D=${D}: ${JSON.stringify(s)}`);
      assert.ok(s.dkdvOnly < s.dkdv);
    }
    // D=128: K, V (2 × 128 × 136 × 2) + 2 stages of Q, dO, lse2, D (2 × (2 × 64 × 136 × 2 + 512)) + dSᵀ 64 × 136 × 2.
    const d128 = flashBackwardSharedBytes(flashBackwardVariant(problem({}, { H: 128 }), 'sm_80'));
    assert.equal(d128.dkdv, 69632 + 70656 + 17408);
    assert.equal(FLASH_BACKWARD_TILES.keys % 16, 0);
  });
});
