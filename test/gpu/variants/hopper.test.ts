/**
 * Score/mask modifiers and block masks on the flash backend's Hopper forward (wgmma + TMA, sm_90a),
 * against the float64 oracle (test/support/modifier-reference.ts): hand-written modifier sets in the
 * generated source's shape (test/support/modifier-cases.ts) given to the backend on the problem,
 * output and log-sum-exp, at H = 64, 128 and 256, a few blocks and more than two waves; and a
 * block mask skips EMPTY tiles and gives what evaluating every tile gives, within a bf16 ulp or two.
 * Each case asserts that the wgmma variant ran
 * with the modifier set in its key. Skips without a GPU, or on a GPU that is not sm_90a.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { attention, runAttention } from '../../../src/api/attention.js';
import { validateAttention } from '../../../src/api/validate.js';
import { launchHopper } from '../../../src/backends/cuda/flash/sm90/hopper.js';
import { hopperVariant } from '../../../src/backends/cuda/flash/sm90/hopper-variant.js';
import { cudaAvailable, getCudaContext } from '../../../src/backends/cuda/runtime/context.js';
import type { AttentionProblem } from '../../../src/backends/problem.js';
import { reloadConfig } from '../../../src/config.js';
import { UnsupportedError } from '../../../src/errors.js';
import { randomNormal } from '../../../src/tensor/random.js';
import { Tensor } from '../../../src/tensor/tensor.js';
import { createBlockMask } from '../../../src/variants/block-mask.js';
import { softcap } from '../../../src/variants/library.js';
import { maskMod, scoreMod } from '../../../src/variants/modifiers.js';
import type { BlockMask, CompiledModifiers } from '../../../src/variants/types.js';
import {
  alibiCase,
  bandsCase,
  blockKinds,
  blockMaskFrom,
  type CaseShape,
  causalCase,
  compiledModifiers,
  documentCase,
  type ModifierCase,
  relativeBiasCase,
  slidingWindowCase,
  softcapCase,
} from '../../support/modifier-cases.js';
import { modifierReference } from '../../support/modifier-reference.js';

const cuda = cudaAvailable();
const capability = cuda.ok ? getCudaContext().properties.computeCapability : null;
const skip = !cuda.ok
  ? `no CUDA device: ${cuda.reason}`
  : capability?.major === 9
    ? false
    : `the Hopper kernel needs sm_90a (this GPU is sm_${capability?.major}${capability?.minor})`;
const seed = Number(process.env.ATTNLAB_TEST_SEED ?? Date.now() % 1_000_000_000);
const saved = process.env.ATTNLAB_FLASH_KERNEL;

interface Shape extends CaseShape {
  readonly K: number;
  readonly H: number;
}

/** bf16 output: 2^-8 relative per rounding of P and of the output. */
const RELATIVE = 0.02;

function expectClose(name: string, got: Float64Array, want: Float64Array): void {
  let error = 0;
  let scale = 1;
  let mismatched = 0;
  for (let i = 0; i < got.length; i++) {
    if (Number.isFinite(want[i])) {
      if (!Number.isFinite(got[i])) mismatched++;
      error = Math.max(error, Math.abs(got[i] - want[i]));
      scale = Math.max(scale, Math.abs(want[i]));
    } else if (!Object.is(got[i], want[i]) && !(Number.isNaN(got[i]) && Number.isNaN(want[i]))) mismatched++;
  }
  assert.equal(mismatched, 0, `${name}: ${mismatched} elements differ from the reference in NaN/±inf`);
  assert.ok(
    error <= RELATIVE * scale,
    `${name}: max |err| ${error.toExponential(3)} against max |ref| ${scale.toExponential(3)}`,
  );
}

/**
 * Two device results of the same case within 2^-7 of the larger's magnitude, finite in the same places:
 * a bf16 ulp or two, where the two kernels sum or round the same terms in another order.
 */
function expectNear(name: string, a: Tensor, b: Tensor): void {
  const x = a.toFloat64Array();
  const y = b.toFloat64Array();
  let error = 0;
  let scale = 1;
  for (let i = 0; i < x.length; i++) {
    assert.equal(
      Number.isFinite(x[i]),
      Number.isFinite(y[i]),
      `${name}: element ${i} ${x[i]} against ${y[i]}`,
    );
    if (Number.isFinite(y[i])) {
      error = Math.max(error, Math.abs(x[i] - y[i]));
      scale = Math.max(scale, Math.abs(y[i]));
    }
  }
  assert.ok(error <= 2 ** -7 * scale, `${name}: max ${error} against ${scale}`);
}

/** The case's captures and (when it asks for one) block mask on the device, as the backend reads them. */
function onDevice(m: ModifierCase, shape: Shape) {
  const captures = m.captures.map((c) => ({ ...c, tensor: c.tensor.to('cuda') }));
  let kinds: Tensor | null = null;
  let blockMask: BlockMask | undefined;
  if (m.blockMask && m.mask) {
    const host = blockKinds(m.mask, shape, false);
    const dims = [host.Bm, host.Nm, Math.ceil(shape.T / host.blockQ), Math.ceil(shape.S / host.blockKV)];
    kinds = Tensor.fromRaw(host.kinds, dims, 'bool').to('cuda');
    blockMask = blockMaskFrom(host, shape, kinds, m.key);
  }
  return {
    modifiers: compiledModifiers(m, captures),
    blockMask,
    release: () => {
      for (const c of captures) c.tensor.dispose();
      kinds?.dispose();
    },
  };
}

function inputs(shape: Shape, at: number) {
  const { B, T, S, N, K, H } = shape;
  return {
    q: randomNormal([B, T, N, H], { seed: at, dtype: 'bfloat16' }),
    k: randomNormal([B, S, K, H], { seed: at + 1, dtype: 'bfloat16' }),
    v: randomNormal([B, S, K, H], { seed: at + 2, dtype: 'bfloat16' }),
    dO: randomNormal([B, T, N, H], { seed: at + 3, dtype: 'bfloat16' }),
  };
}

/** The forward of the case on the flash backend: output, log-sum-exp and the variant that ran. */
function forward(
  t: { q: Tensor; k: Tensor; v: Tensor },
  modifiers: CompiledModifiers,
  blockMask: BlockMask | undefined,
) {
  const p = {
    ...validateAttention(t.q, t.k, t.v, { returnLogSumExp: true, implementation: 'flash' }),
    modifiers,
    blockMask,
  } as AttentionProblem;
  const out = runAttention(p);
  assert.equal(out.backend, 'flash');
  return { output: out.output, lse: out.logSumExp as Tensor, variant: out.variant };
}

describe('GPU flash modifiers and block masks on the Hopper forward', { skip }, () => {
  before(() => {
    console.log(`# variants/hopper.test.ts seed ${seed} (ATTNLAB_TEST_SEED=${seed} replays it)`);
    process.env.ATTNLAB_FLASH_KERNEL = 'wgmma';
    reloadConfig();
  });
  after(() => {
    if (saved === undefined) delete process.env.ATTNLAB_FLASH_KERNEL;
    else process.env.ATTNLAB_FLASH_KERNEL = saved;
    reloadConfig();
  });

  // Each shape with the cases that matter for its tile (every case compiles its own kernel, ~5–10 s
  // of NVRTC): D=128 all of them on a ragged last tile (520 rows); D=64 (two consumers with
  // modifiers) with GQA; D=256; and 640 rows of 56 heads, 280 blocks (more than two waves of SMs).
  const matrix: Array<[Shape, (s: Shape) => ModifierCase[]]> = [
    [
      { B: 1, T: 520, S: 520, N: 2, K: 2, H: 128 },
      (s) => [
        causalCase(),
        { ...causalCase(), blockMask: true },
        slidingWindowCase(100),
        documentCase(s, 4, seed, true),
        alibiCase(s),
        softcapCase(2.5),
        relativeBiasCase(s, seed % 97),
      ],
    ],
    [
      { B: 2, T: 384, S: 384, N: 4, K: 2, H: 64 },
      (s) => [causalCase(), documentCase(s, 4, seed, true), alibiCase(s)],
    ],
    [
      { B: 1, T: 300, S: 300, N: 2, K: 1, H: 256 },
      (s) => [slidingWindowCase(60), softcapCase(2.5), relativeBiasCase(s, seed % 89)],
    ],
    [
      { B: 1, T: 640, S: 640, N: 56, K: 8, H: 64 },
      (s) => [{ ...causalCase(), blockMask: true }, documentCase(s, 5, seed, true)],
    ],
  ];
  for (const [shape, cases] of matrix) {
    for (const m of cases(shape)) {
      it(`${m.name}${m.blockMask ? ' (block mask)' : ''}, B=${shape.B} T=${shape.T} N=${shape.N} K=${shape.K} H=${shape.H}: the wgmma kernel against float64`, () => {
        const host = inputs(shape, seed + shape.H + shape.N);
        const want = modifierReference(m, host.q, host.k, host.v, host.dO, 1 / Math.sqrt(shape.H));
        const dev = onDevice(m, shape);
        const t = { q: host.q.to('cuda'), k: host.k.to('cuda'), v: host.v.to('cuda') };
        const got = forward(t, dev.modifiers, dev.blockMask);
        assert.match(got.variant, new RegExp(`\\.mods-${m.key}${m.blockMask ? '\\.bmask' : ''}\\.wgmma$`));
        expectClose('output', got.output.toFloat64Array(), want.output);
        expectClose('logSumExp', got.lse.toFloat64Array(), want.logSumExp);
        for (const x of [got.output, got.lse, ...Object.values(t)]) x.dispose();
        dev.release();
      });
    }
  }

  it('a block mask skips EMPTY tiles and gives what evaluating every tile gives (H=128, H=64)', () => {
    for (const shape of [
      { B: 2, T: 1024, S: 1024, N: 2, K: 1, H: 128 },
      { B: 1, T: 1024, S: 1024, N: 40, K: 8, H: 64 },
    ]) {
      const m = documentCase(shape, 6, seed, true);
      const host = inputs(shape, seed + 7);
      const t = { q: host.q.to('cuda'), k: host.k.to('cuda'), v: host.v.to('cuda') };
      const dev = onDevice(m, shape);
      const skipping = forward(t, dev.modifiers, dev.blockMask);
      const every = forward(t, dev.modifiers, undefined);
      assert.match(skipping.variant, /\.bmask\.wgmma$/);
      assert.doesNotMatch(every.variant, /bmask/);
      // Within a bf16 ulp or two: a FULL tile takes the unmasked path, whose exponent is one FFMA
      // where the masked path rounds the scaled score first.
      expectNear(`output, H=${shape.H}: |skipping − every|`, skipping.output, every.output);
      expectNear(`logSumExp, H=${shape.H}: |skipping − every|`, skipping.lse, every.lse);
      for (const x of [skipping.output, skipping.lse, every.output, every.lse, ...Object.values(t)])
        x.dispose();
      dev.release();
    }
  });

  // The kernel's dynamic persistent grid for a block mask (from 264 items at D ≤ 128; the library does not
  // run it since an H100's racecheck found hazards there) (its producer classifies
  // each item's key tiles into the bitmaps of the item's parity while the consumers run the item before):
  // the same items computed alone, so its output and log-sum-exp equal the 2-D grid's bit for bit, on
  // every one of several launches. Shapes of 384–512 items, 3–4 a block on 132 SMs, so that blocks pass
  // from item to item: ragged T (a partial last tile), GQA, documents of random lengths (items of 1 to
  // 16 key tiles), bands of rows that see no key (items without keys between items with keys), D=128
  // and D=64.
  it('a block mask on the dynamic grid equals the 2-D grid bit for bit, launch after launch (documents, bands without keys, H=128 and H=64)', (t) => {
    // The library runs a block mask on the 2-D grid and refuses ATTNLAB_BLOCK_MASK_GRID=dynamic (an H100's
    // racecheck found 3 hazards on the dynamic grid, and it was slower); the kernel's dynamic grid is
    // launched here directly, so that a fix can be checked against the 2-D grid.
    const savedGrid = process.env.ATTNLAB_BLOCK_MASK_GRID;
    t.after(() => {
      if (savedGrid === undefined) delete process.env.ATTNLAB_BLOCK_MASK_GRID;
      else process.env.ATTNLAB_BLOCK_MASK_GRID = savedGrid;
      reloadConfig();
    });
    const cases: Array<[Shape, (s: Shape) => ModifierCase]> = [
      [{ B: 2, T: 2000, S: 2000, N: 16, K: 4, H: 128 }, (s) => documentCase(s, 7, seed, true)],
      [{ B: 2, T: 2000, S: 2000, N: 16, K: 4, H: 128 }, () => bandsCase(384)],
      [{ B: 1, T: 1000, S: 1000, N: 48, K: 8, H: 64 }, (s) => documentCase(s, 5, seed, true)],
    ];
    for (const [shape, make] of cases) {
      const m = make(shape);
      const host = inputs(shape, seed + 11);
      const t = { q: host.q.to('cuda'), k: host.k.to('cuda'), v: host.v.to('cuda') };
      const dev = onDevice(m, shape);
      const p = {
        ...validateAttention(t.q, t.k, t.v, { returnLogSumExp: true, implementation: 'flash' }),
        modifiers: dev.modifiers,
        blockMask: dev.blockMask,
      } as AttentionProblem;
      const found = hopperVariant(p, 'sm_90a', 'wgmma', null);
      assert.ok('variant' in found, JSON.stringify(found));
      assert.equal(found.variant.persistent, false, 'the host takes the 2-D grid for a block mask');
      const launch = (persistent: 'dynamic' | false) => {
        const o = Tensor.zeros([shape.B, shape.T, shape.N, shape.H], 'bfloat16').to('cuda');
        const lse = Tensor.zeros([shape.B, shape.T, shape.N], 'float32').to('cuda');
        const pointers = { q: t.q.buffer.ptr, k: t.k.buffer.ptr, v: t.v.buffer.ptr, o: o.buffer.ptr };
        launchHopper(
          p,
          { ...found.variant, persistent },
          {
            ...pointers,
            ...{ lse: lse.buffer.ptr, bias: 0n, mask: 0n, qLens: 0n, kvLens: 0n },
          },
        );
        return { o, lse };
      };
      const grid = launch(false);
      const [gridO, gridLse] = [grid.o.toHost().data, grid.lse.toHost().data] as ArrayLike<number>[];
      const label = `${m.name}, H=${shape.H}`;
      for (let run = 0; run < 5; run++) {
        const dynamic = launch('dynamic');
        for (const [name, a, b] of [
          ['output', dynamic.o, gridO],
          ['logSumExp', dynamic.lse, gridLse],
        ] as const) {
          const x = a.toHost().data as ArrayLike<number>;
          let differ = 0;
          for (let i = 0; i < x.length; i++) if (!Object.is(x[i], b[i])) differ++;
          assert.equal(
            differ,
            0,
            `${label}, launch ${run}: ${name}: ${differ} of ${x.length} elements differ`,
          );
        }
        dynamic.o.dispose();
        dynamic.lse.dispose();
      }
      // The library's own call runs the 2-D variant, and refuses the dynamic grid when asked for it.
      const library = forward(t, dev.modifiers, dev.blockMask);
      assert.doesNotMatch(library.variant, /\.dyn\./);
      process.env.ATTNLAB_BLOCK_MASK_GRID = 'dynamic';
      reloadConfig();
      assert.throws(() => forward(t, dev.modifiers, dev.blockMask), UnsupportedError);
      delete process.env.ATTNLAB_BLOCK_MASK_GRID;
      reloadConfig();
      for (const x of [grid.o, grid.lse, library.output, library.lse, ...Object.values(t)]) x.dispose();
      dev.release();
    }
  });

  // ATTNLAB_BLOCK_MASK_TILE=64x64: a block mask on 64 query rows × 64 keys, one consumer warpgroup,
  // two blocks an SM (fwd_config.cuh MIN_BLOCKS). Against float64 on small shapes (a ragged last tile,
  // GQA, H=128 and H=64), and on shapes of 1,000–1,500 items (several waves of two blocks an SM:
  // documents of random lengths, bands of rows that see no key, causal as a block mask) near the
  // 128 × 128 tile: the keys summed in tiles of 64 instead of 128 round differently, within the
  // tolerance of the test above.
  it('a block mask on the 64 × 64 one-consumer tile (ATTNLAB_BLOCK_MASK_TILE=64x64): against float64 and near the 128 × 128 tile (documents, bands without keys, causal, H=128 and H=64)', (t) => {
    const savedTile = process.env.ATTNLAB_BLOCK_MASK_TILE;
    const setTile = (tile: string | undefined) => {
      if (tile === undefined) delete process.env.ATTNLAB_BLOCK_MASK_TILE;
      else process.env.ATTNLAB_BLOCK_MASK_TILE = tile;
      reloadConfig();
    };
    t.after(() => setTile(savedTile));
    const small: Array<[Shape, (s: Shape) => ModifierCase]> = [
      [{ B: 1, T: 520, S: 520, N: 2, K: 2, H: 128 }, (s) => documentCase(s, 4, seed, true)],
      [{ B: 1, T: 520, S: 520, N: 2, K: 2, H: 128 }, () => ({ ...causalCase(), blockMask: true })],
      [{ B: 2, T: 384, S: 384, N: 4, K: 2, H: 64 }, (s) => documentCase(s, 4, seed, true)],
    ];
    for (const [shape, make] of small) {
      const m = make(shape);
      const host = inputs(shape, seed + shape.H + shape.N);
      const want = modifierReference(m, host.q, host.k, host.v, host.dO, 1 / Math.sqrt(shape.H));
      const dev = onDevice(m, shape);
      const d = { q: host.q.to('cuda'), k: host.k.to('cuda'), v: host.v.to('cuda') };
      setTile('64x64');
      const got = forward(d, dev.modifiers, dev.blockMask);
      assert.match(got.variant, new RegExp(`\\.64x64x2wg\\.lw\\.ds\\.sl8\\.mods-${m.key}\\.bmask\\.wgmma$`));
      expectClose(`${m.name} H=${shape.H} output`, got.output.toFloat64Array(), want.output);
      expectClose(`${m.name} H=${shape.H} logSumExp`, got.lse.toFloat64Array(), want.logSumExp);
      setTile(undefined);
      for (const x of [got.output, got.lse, ...Object.values(d)]) x.dispose();
      dev.release();
    }
    const large: Array<[Shape, (s: Shape) => ModifierCase]> = [
      [{ B: 2, T: 2000, S: 2000, N: 16, K: 4, H: 128 }, (s) => documentCase(s, 7, seed, true)],
      [{ B: 2, T: 2000, S: 2000, N: 16, K: 4, H: 128 }, () => bandsCase(384)],
      [{ B: 1, T: 2048, S: 2048, N: 24, K: 8, H: 128 }, () => ({ ...causalCase(), blockMask: true })],
      [{ B: 1, T: 1000, S: 1000, N: 48, K: 8, H: 64 }, (s) => documentCase(s, 5, seed, true)],
    ];
    for (const [shape, make] of large) {
      const m = make(shape);
      const host = inputs(shape, seed + 13);
      const d = { q: host.q.to('cuda'), k: host.k.to('cuda'), v: host.v.to('cuda') };
      const dev = onDevice(m, shape);
      setTile('64x64');
      const short = forward(d, dev.modifiers, dev.blockMask);
      setTile(undefined);
      const wide = forward(d, dev.modifiers, dev.blockMask);
      assert.match(short.variant, /\.64x64x2wg\./);
      assert.match(wide.variant, /\.128x128x3wg\./);
      expectNear(`${m.name} H=${shape.H} output: |64×64 − 128×128|`, short.output, wide.output);
      expectNear(`${m.name} H=${shape.H} logSumExp: |64×64 − 128×128|`, short.lse, wide.lse);
      for (const x of [short.output, short.lse, wide.output, wide.lse, ...Object.values(d)]) x.dispose();
      dev.release();
    }
  });

  // The variants API end to end on the Hopper kernel: expressions compiled by the generator, a block
  // mask made on the GPU by createBlockMask, attention with implementation 'flash', against the CPU
  // reference evaluating the same expressions.
  it('public API: document mask (createBlockMask on the GPU) + ALiBi at H=128 on the wgmma kernel, against the reference', () => {
    const shape: Shape = { B: 2, T: 300, S: 300, N: 4, K: 2, H: 128 };
    const host = inputs(shape, seed + 90);
    const hostIds = documentCase(shape, 3, seed, false).captures[0].tensor;
    const slopes = Tensor.fromArray([0.5, 0.25, 0.125, 0.0625], [4], 'float32');
    const mask = 'docIds[b, q] == docIds[b, kv] && kv <= q';
    const score = 'score + slopes[h] * (kv - q)';
    const want = attention(host.q, host.k, host.v, {
      maskMod: maskMod(mask, { docIds: hostIds }),
      scoreMod: scoreMod(score, { slopes }),
      implementation: 'reference',
      returnLogSumExp: true,
    });
    const [ids, slopesOn] = [hostIds.to('cuda'), slopes.to('cuda')];
    const onGpu = {
      maskMod: maskMod(mask, { docIds: ids }),
      scoreMod: scoreMod(score, { slopes: slopesOn }),
    };
    const blockMask = createBlockMask(onGpu.maskMod, { B: 2, N: 4, T: 300, S: 300 });
    const [q, k, v] = [host.q, host.k, host.v].map((x) => x.to('cuda'));
    const got = attention(q, k, v, { ...onGpu, blockMask, implementation: 'flash', returnLogSumExp: true });
    assert.equal(got.backend, 'flash');
    assert.match(got.variant, /\.mods-.*\.bmask\.wgmma$/);
    expectClose('output', got.output.toFloat64Array(), want.output.toFloat64Array());
    expectClose(
      'logSumExp',
      (got.logSumExp as Tensor).toFloat64Array(),
      (want.logSumExp as Tensor).toFloat64Array(),
    );
    for (const x of [q, k, v, ids, slopesOn, got.output, got.logSumExp]) x?.dispose();
  });

  // Score modifiers with constant factors in and out (softcap's c·tanh(s/c), or written with other
  // constants): the kernel folds them into the score's scale and the softmax's factor (flash/mask.cuh);
  // the reference evaluates the expression as written. A scale of 0.5 puts the scores at a standard
  // deviation of ~5.7 at H=128, so the caps of 4 and 3 bend most of them.
  it('public API: softcap and a folded tanh expression at H=128 (causal) and H=64, as written and folded (ATTNLAB_FOLD_SCORE_FACTORS=1), against the reference', (t) => {
    const savedFold = process.env.ATTNLAB_FOLD_SCORE_FACTORS;
    t.after(() => {
      if (savedFold === undefined) delete process.env.ATTNLAB_FOLD_SCORE_FACTORS;
      else process.env.ATTNLAB_FOLD_SCORE_FACTORS = savedFold;
      reloadConfig();
    });
    for (const [H, isCausal, mod, fold] of [
      [128, true, softcap(4), '0'],
      [128, true, softcap(4), '1'],
      [64, false, scoreMod('tanh(score * 0.25) * 3.0'), '0'],
      [64, false, scoreMod('tanh(score * 0.25) * 3.0'), '1'],
    ] as const) {
      process.env.ATTNLAB_FOLD_SCORE_FACTORS = fold;
      reloadConfig();
      const shape: Shape = { B: 2, T: 333, S: 333, N: 4, K: 2, H };
      const host = inputs(shape, seed + 120 + H);
      const options = { scoreMod: mod, isCausal, scale: 0.5, returnLogSumExp: true };
      const want = attention(host.q, host.k, host.v, { ...options, implementation: 'reference' });
      const [q, k, v] = [host.q, host.k, host.v].map((x) => x.to('cuda'));
      const got = attention(q, k, v, { ...options, implementation: 'flash' });
      assert.match(got.variant, /\.mods-.*\.wgmma$/);
      expectClose(`output, H=${H} fold=${fold}`, got.output.toFloat64Array(), want.output.toFloat64Array());
      expectClose(
        `logSumExp, H=${H} fold=${fold}`,
        (got.logSumExp as Tensor).toFloat64Array(),
        (want.logSumExp as Tensor).toFloat64Array(),
      );
      for (const x of [q, k, v, got.output, got.logSumExp]) x?.dispose();
    }
  });
});
