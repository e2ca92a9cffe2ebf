/**
 * Score/mask modifiers, block masks, and the fused backward of dense biases and boolean masks on the
 * CUDA flash backend's mma.sync kernels (the forward, the dK/dV loop and the deterministic dQ pass),
 * against float64 oracles:
 *   - hand-written modifier sets (test/support/modifier-cases.ts: the generated source's shape) given
 *     to the backend on the problem, against modifier-reference.ts: output, log-sum-exp, dQ, dK, dV
 *     and a captured table's gradient;
 *   - a block mask skips tiles and gives what evaluating every tile gives, within a bf16 ulp or two (a
 *     FULL tile takes the unmasked path, whose exponent is one FFMA where the masked path rounds
 *     the scaled score first);
 *   - dense bias (dBias) and dense boolean masks through attentionVjp with implementation 'flash',
 *     against the reference backward with the suite's rule (2 × the plain bf16 error + a floor).
 * The suite runs once per backward dK/dV loop: 'mma' (ATTNLAB_FLASH_BWD_KERNEL=mma, every GPU) and
 * 'wgmma' (the Hopper loop, hopper/bwd_dkdv_sm90.cuh; sm_90a only, skipped elsewhere saying so). The
 * forward stays on its mma.sync kernel (ATTNLAB_FLASH_KERNEL=mma) in both, so that a failure names the
 * backward loop. Each test's name starts with its loop (`wgmma: …`), so that a name pattern picks one
 * loop's cases (the sanitizer runs do). Skips without a GPU.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { attention } from '../../../src/api/attention.js';
import { attentionVjp } from '../../../src/api/backward.js';
import { createBlockMask } from '../../../src/api/block-mask.js';
import { validateAttention } from '../../../src/api/validate.js';
import { validateBackward } from '../../../src/api/validate-backward.js';
import { planFor } from '../../../src/backends/backend.js';
import type { BackwardProblem } from '../../../src/backends/backward-problem.js';
import { cudaFlashBackend } from '../../../src/backends/cuda/flash/backend.js';
import { cudaFlashBackward } from '../../../src/backends/cuda/flash/sm80/backward.js';
import { cudaAvailable, targetArch } from '../../../src/backends/cuda/runtime/context.js';
import type { AttentionOptions, AttentionProblem } from '../../../src/backends/problem.js';
import {
  checkGradients,
  gradientValues,
  plainLowPrecisionGradients,
  referenceGradients,
} from '../../../src/check/gradients.js';
import { reloadConfig } from '../../../src/config.js';
import { randomNormal } from '../../../src/tensor/random.js';
import { Tensor } from '../../../src/tensor/tensor.js';
import { softcap } from '../../../src/variants/library.js';
import { maskMod, scoreMod } from '../../../src/variants/modifiers.js';
import type { BlockMask, CompiledModifiers } from '../../../src/variants/types.js';
import {
  alibiCase,
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
const skip = cuda.ok ? false : `no CUDA device: ${cuda.reason}`;
const arch = cuda.ok ? targetArch() : '';
/** The backward loops the suite runs, with why one is skipped on this device. */
const LOOPS = [
  { loop: 'mma', skip },
  {
    loop: 'wgmma',
    skip: skip || (arch !== 'sm_90a' ? `${arch}: the wgmma backward loop needs sm_90a` : false),
  },
] as const;
const seed = Number(process.env.ATTNLAB_TEST_SEED ?? Date.now() % 1_000_000_000);

const KEPT = ['ATTNLAB_FLASH_KERNEL', 'ATTNLAB_FLASH_BWD_KERNEL'] as const;
const saved = KEPT.map((name) => process.env[name]);

interface Shape extends CaseShape {
  readonly K: number;
  readonly H: number;
}

/** Max |a − b| over the elements, and max |b| (at least 1). */
function errors(a: Float64Array, b: Float64Array): { error: number; scale: number; nan: number } {
  let error = 0;
  let scale = 1;
  let nan = 0;
  for (let i = 0; i < a.length; i++) {
    if (Number.isNaN(a[i]) !== Number.isNaN(b[i])) nan++;
    else if (Number.isFinite(b[i])) {
      error = Math.max(error, Math.abs(a[i] - b[i]));
      scale = Math.max(scale, Math.abs(b[i]));
    } else if (a[i] !== b[i]) nan++;
  }
  return { error, scale, nan };
}

/** A boolean mask keeping about 70% of the pairs: a standard normal value above −0.52. */
function randomMask(shape: number[], at: number): Tensor {
  const values = randomNormal(shape, { seed: at, dtype: 'float32' }).toFloat64Array();
  return Tensor.fromArray(
    Uint8Array.from(values, (x) => (x > -0.52 ? 1 : 0)),
    shape,
    'bool',
  );
}

/** bf16 attention: 2^-8 relative per rounding; the gradients sum S terms of rounded P and dS. */
const RELATIVE = 0.02;

function expectClose(name: string, got: Float64Array, want: Float64Array): void {
  const { error, scale, nan } = errors(got, want);
  assert.equal(nan, 0, `${name}: ${nan} elements differ from the reference in NaN/±inf`);
  assert.ok(
    error <= RELATIVE * scale,
    `${name}: max |err| ${error.toExponential(3)} against max |ref| ${scale.toExponential(3)}`,
  );
}

interface Device {
  readonly modifiers: CompiledModifiers;
  readonly blockMask: BlockMask | undefined;
  release(): void;
}

/** The case's captures and block mask (kinds from the host, 128×128 blocks) on the device, as the problem carries them. */
function onDevice(m: ModifierCase, shape: Shape): Device {
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

/** The forward and the backward of the case on the flash backend (both dQ paths), device tensors out. */
function runCase(
  dev: Device,
  t: { q: Tensor; k: Tensor; v: Tensor; dO: Tensor },
  blockMask: BlockMask | undefined,
  deterministic: boolean,
) {
  const variants = { modifiers: dev.modifiers, blockMask };
  const p: AttentionProblem = {
    ...validateAttention(t.q, t.k, t.v, { returnLogSumExp: true }),
    ...variants,
  } as AttentionProblem;
  const plan = planFor(cudaFlashBackend, p);
  assert.ok(plan.ok, plan.ok ? '' : plan.reason);
  const forward = cudaFlashBackend.run(plan.plan, p);
  const lse = forward.logSumExp as Tensor;
  const pb = {
    ...validateBackward(t.q, t.k, t.v, forward.output, lse, t.dO, { deterministic }),
    ...variants,
  } as BackwardProblem;
  const bplan = planFor(cudaFlashBackward, pb);
  assert.ok(bplan.ok, bplan.ok ? '' : bplan.reason);
  const grads = cudaFlashBackward.run(bplan.plan, pb);
  return { forward, lse, grads };
}

for (const { loop, skip } of LOOPS)
  describe(`GPU flash modifiers, block masks, bias and mask backward (${loop} dK/dV loop)`, { skip }, () => {
    before(() => {
      console.log(
        `# variants/flash.test.ts seed ${seed} (ATTNLAB_TEST_SEED=${seed} replays it), ${loop} loop`,
      );
      process.env.ATTNLAB_FLASH_KERNEL = 'mma';
      process.env.ATTNLAB_FLASH_BWD_KERNEL = loop;
      reloadConfig();
    });
    /** The backward variant names the loop under test. */
    const ranLoop = (variant: string) =>
      loop === 'wgmma' ? assert.match(variant, /\.wgmma\b/) : assert.doesNotMatch(variant, /wgmma/);
    after(() => {
      KEPT.forEach((name, i) => {
        if (saved[i] === undefined) delete process.env[name];
        else process.env[name] = saved[i];
      });
      reloadConfig();
    });

    const shapes: Shape[] = [
      { B: 2, T: 384, S: 384, N: 4, K: 2, H: 64 },
      { B: 1, T: 520, S: 520, N: 2, K: 2, H: 128 },
    ];
    const cases = (shape: Shape): ModifierCase[] => [
      causalCase(),
      slidingWindowCase(100),
      documentCase(shape, 4, seed, true),
      alibiCase(shape),
      softcapCase(2),
      relativeBiasCase(shape, seed % 97),
    ];
    for (const shape of shapes) {
      for (const m of cases(shape)) {
        it(`${loop}: ${m.name}, B=${shape.B} T=${shape.T} N=${shape.N} K=${shape.K} H=${shape.H}: forward and backward against float64`, () => {
          const host = inputs(shape, seed + shape.H);
          const scale = 1 / Math.sqrt(shape.H);
          const want = modifierReference(m, host.q, host.k, host.v, host.dO, scale);
          const dev = onDevice(m, shape);
          const t = {
            q: host.q.to('cuda'),
            k: host.k.to('cuda'),
            v: host.v.to('cuda'),
            dO: host.dO.to('cuda'),
          };
          for (const deterministic of m.captures.some((c) => c.needsGrad) ? [false] : [false, true]) {
            const { forward, lse, grads } = runCase(dev, t, dev.blockMask, deterministic);
            assert.match(forward.variant, new RegExp(`mods-${m.key}`));
            assert.doesNotMatch(forward.variant, /wgmma/);
            assert.match(grads.variant, new RegExp(`mods-${m.key}`));
            ranLoop(grads.variant);
            expectClose('output', forward.output.toFloat64Array(), want.output);
            expectClose('logSumExp', lse.toFloat64Array(), want.logSumExp);
            expectClose(
              `dQuery (deterministic ${deterministic})`,
              grads.dQuery.toFloat64Array(),
              want.dQuery,
            );
            expectClose('dKey', grads.dKey.toFloat64Array(), want.dKey);
            expectClose('dValue', grads.dValue.toFloat64Array(), want.dValue);
            m.captures.forEach((c, i) => {
              if (!c.needsGrad) return;
              const got = grads.dCaptures?.[c.name];
              assert.ok(got, `d${c.name} missing`);
              expectClose(`d${c.name}`, got.toFloat64Array(), want.dCaptures[i]);
              got.dispose();
            });
            for (const x of [forward.output, lse, grads.dQuery, grads.dKey, grads.dValue]) x.dispose();
          }
          for (const x of Object.values(t)) x.dispose();
          dev.release();
        });
      }
    }

    it(`${loop}: a block mask skips empty tiles and gives the output, lse, dQ, dK and dV of evaluating every tile`, () => {
      const shape: Shape = { B: 2, T: 1024, S: 1024, N: 2, K: 1, H: 128 };
      const m = documentCase(shape, 6, seed, true);
      const host = inputs(shape, seed + 7);
      const dev = onDevice(m, shape);
      const t = { q: host.q.to('cuda'), k: host.k.to('cuda'), v: host.v.to('cuda'), dO: host.dO.to('cuda') };
      const skipping = runCase(dev, t, dev.blockMask, false);
      const every = runCase(dev, t, undefined, false);
      assert.match(skipping.forward.variant, /\.bmask$/);
      assert.doesNotMatch(every.forward.variant, /bmask/);
      assert.match(skipping.grads.variant, /\.bmask$/);
      ranLoop(skipping.grads.variant);
      const near = (name: string, a: Tensor, b: Tensor) => {
        const { error, scale, nan } = errors(a.toFloat64Array(), b.toFloat64Array());
        assert.equal(nan, 0, `${name}: NaN/±inf differ`);
        assert.ok(error <= 2 ** -7 * scale, `${name}: max |skipping − every| ${error} against ${scale}`);
      };
      near('output', skipping.forward.output, every.forward.output);
      near('logSumExp', skipping.lse, every.lse);
      near('dQuery', skipping.grads.dQuery, every.grads.dQuery);
      near('dKey', skipping.grads.dKey, every.grads.dKey);
      near('dValue', skipping.grads.dValue, every.grads.dValue);
      for (const r of [skipping, every])
        for (const x of [r.forward.output, r.lse, r.grads.dQuery, r.grads.dKey, r.grads.dValue]) x.dispose();
      for (const x of Object.values(t)) x.dispose();
      dev.release();
    });

    // The variants API end to end: modifiers written as expressions, compiled by the generator, a block
    // mask from createBlockMask (kinds on the GPU), attention / attentionVjp with implementation 'flash',
    // against the CPU reference evaluating the same expressions.
    it(`${loop}: public API: document mask (createBlockMask, kinds on the GPU) + ALiBi, flash forward and backward against the reference`, () => {
      const shape: Shape = { B: 2, T: 300, S: 300, N: 4, K: 2, H: 64 };
      const host = inputs(shape, seed + 90);
      const docs = documentCase(shape, 3, seed, false);
      const hostIds = docs.captures[0].tensor;
      const slopes = Tensor.fromArray([0.5, 0.25, 0.125, 0.0625], [4], 'float32');
      const expression = {
        mask: 'docIds[b, q] == docIds[b, kv] && kv <= q',
        score: 'score + slopes[h] * (kv - q)',
      };
      const ref = {
        maskMod: maskMod(expression.mask, { docIds: hostIds }),
        scoreMod: scoreMod(expression.score, { slopes }),
      };
      const [ids, slopesOn] = [hostIds.to('cuda'), slopes.to('cuda')];
      const onGpu = {
        maskMod: maskMod(expression.mask, { docIds: ids }),
        scoreMod: scoreMod(expression.score, { slopes: slopesOn }),
      };
      const blockMask = createBlockMask(onGpu.maskMod, { B: 2, N: 4, T: 300, S: 300 });
      const want = attention(host.q, host.k, host.v, {
        ...ref,
        implementation: 'reference',
        returnLogSumExp: true,
      });
      const [q, k, v, dO] = [host.q, host.k, host.v, host.dO].map((x) => x.to('cuda'));
      const got = attention(q, k, v, { ...onGpu, blockMask, implementation: 'flash', returnLogSumExp: true });
      assert.equal(got.backend, 'flash');
      assert.match(got.variant, /mods-.*bmask/);
      expectClose('output', got.output.toFloat64Array(), want.output.toFloat64Array());
      // The reference backward takes no modifiers yet: the float64 oracle of modifier-reference.ts does.
      const f = attentionVjp(q, k, v, { ...onGpu, blockMask, implementation: 'flash' });
      const g = f.backward(dO);
      assert.equal(g.backend, 'flash');
      ranLoop(g.variant);
      const slope = slopes.toFloat64Array();
      const oracle: ModifierCase = {
        ...docs,
        score: (x, _b, h, qi, kv) => x + slope[h] * (kv - qi),
        scoreGrad: () => 1,
      };
      const wg = modifierReference(oracle, host.q, host.k, host.v, host.dO, 1 / Math.sqrt(shape.H));
      expectClose('output (oracle)', got.output.toFloat64Array(), wg.output);
      expectClose('dQuery', g.dQuery.toFloat64Array(), wg.dQuery);
      expectClose('dKey', g.dKey.toFloat64Array(), wg.dKey);
      expectClose('dValue', g.dValue.toFloat64Array(), wg.dValue);
      for (const x of [q, k, v, dO, ids, slopesOn, got.output, got.logSumExp, f.output, f.logSumExp])
        x?.dispose();
      for (const x of [g.dQuery, g.dKey, g.dValue]) x.dispose();
    });

    // softcap from the library: the generated source's gradient from the capped score (the wgmma loop takes
    // y from P, ds_mods_from_p) and tanh.approx.f32 there, with the built-in causal mask's boundary tiles.
    it(`${loop}: public API: softcap(2) from the generator, causal, flash backward against the oracle`, () => {
      const shape: Shape = { B: 2, T: 300, S: 300, N: 4, K: 2, H: 64 };
      const host = inputs(shape, seed + 91);
      const [q, k, v, dO] = [host.q, host.k, host.v, host.dO].map((x) => x.to('cuda'));
      const f = attentionVjp(q, k, v, { scoreMod: softcap(2), isCausal: true, implementation: 'flash' });
      const g = f.backward(dO);
      assert.equal(g.backend, 'flash');
      ranLoop(g.variant);
      const oracle: ModifierCase = { ...softcapCase(2), mask: (_b, _h, qi, kv) => kv <= qi };
      const want = modifierReference(oracle, host.q, host.k, host.v, host.dO, 1 / Math.sqrt(shape.H));
      expectClose('output', f.output.toFloat64Array(), want.output);
      expectClose('dQuery', g.dQuery.toFloat64Array(), want.dQuery);
      expectClose('dKey', g.dKey.toFloat64Array(), want.dKey);
      expectClose('dValue', g.dValue.toFloat64Array(), want.dValue);
      for (const x of [q, k, v, dO, f.output, f.logSumExp, g.dQuery, g.dKey, g.dValue]) x?.dispose();
    });

    // Dense biases and masks through the public API: flash's fused backward, dBias in the bias's own
    // shape and dtype, against the reference with the gradient suite's rule.
    const DENSE: Array<[string, (s: Shape) => AttentionOptions, boolean]> = [
      [
        'a full (B,N,T,S) bf16 bias',
        (s) => ({ bias: randomNormal([s.B, s.N, s.T, s.S], { seed: seed + 11, dtype: 'bfloat16' }) }),
        false,
      ],
      [
        'a (1,N,T,S) float32 bias broadcast over the batch, causal',
        (s) => ({
          bias: randomNormal([1, s.N, s.T, s.S], { seed: seed + 12, dtype: 'float32' }),
          isCausal: true,
        }),
        false,
      ],
      [
        'a (B,1,1,S) bf16 key bias broadcast over heads and queries, with padding',
        (s) => ({
          bias: randomNormal([s.B, 1, 1, s.S], { seed: seed + 13, dtype: 'bfloat16' }),
          keyValueSeqLengths: Array.from({ length: s.B }, (_, b) => s.S - 37 * (b + 1)),
        }),
        false,
      ],
      ['a (B,1,T,S) boolean mask', (s) => ({ mask: randomMask([s.B, 1, s.T, s.S], seed + 14) }), true],
      // (1,1,1,S): strides 0 but the keys', so on the wgmma loop rows of 16 keys at once even at S = 520,
      // whose last 16-key group the loads end byte by byte.
      ['a (1,1,1,S) boolean key mask', (s) => ({ mask: randomMask([1, 1, 1, s.S], seed + 17) }), false],
      [
        'a (B,N,T,S) bf16 bias and a (1,1,T,S) boolean mask, window',
        (s) => ({
          bias: randomNormal([s.B, s.N, s.T, s.S], { seed: seed + 15, dtype: 'bfloat16' }),
          mask: randomMask([1, 1, s.T, s.S], seed + 16),
          localWindowSize: [200, 50],
        }),
        true,
      ],
    ];
    for (const shape of shapes)
      for (const [name, make, deterministic] of DENSE) {
        it(`${loop}: fused backward with ${name}, B=${shape.B} T=${shape.T} H=${shape.H}: against float64 (dBias included)`, () => {
          const host = inputs(shape, seed + 50);
          const options = make(shape);
          const reference = referenceGradients({ ...host, options });
          const plain = plainLowPrecisionGradients({ ...host, options }, 'bfloat16');
          const device = (o: AttentionOptions): AttentionOptions => ({
            ...o,
            ...(o.bias ? { bias: o.bias.to('cuda') } : {}),
            ...(o.mask ? { mask: o.mask.to('cuda') } : {}),
          });
          const dOptions = device(options);
          const [q, k, v, dO] = [host.q, host.k, host.v, host.dO].map((x) => x.to('cuda'));
          for (const det of deterministic ? [false, true] : [false]) {
            const f = attentionVjp(q, k, v, { ...dOptions, implementation: 'flash', deterministic: det });
            const g = f.backward(dO);
            assert.equal(g.backend, 'flash');
            assert.match(g.variant, /^flash-bwd\./);
            ranLoop(g.variant);
            if (options.bias) {
              assert.ok(g.dBias, 'dBias missing');
              assert.deepEqual(g.dBias.shape, options.bias.shape);
              assert.equal(g.dBias.dtype, options.bias.dtype);
            }
            const reports = checkGradients(gradientValues(g), reference, plain, 'bfloat16');
            for (const r of reports) assert.ok(r.ok, r.message);
            for (const x of [f.output, f.logSumExp, g.dQuery, g.dKey, g.dValue, g.dBias]) x?.dispose();
          }
          for (const x of [q, k, v, dO, dOptions.bias, dOptions.mask]) x?.dispose();
        });
      }
  });
