/**
 * The generated CUDA modifier functions against the CPU evaluator of the same expressions: score_mod,
 * its backward (ds and the learned captures' gradients, accumulated by atomics) and mask_mod at a few
 * thousand points, compiled by NVRTC (src/kernels/variants/modifier_values.cu). Float32 on the GPU
 * against float64 on the CPU: relative 1e-5 (the piecewise functions take exact float32 arguments, so the
 * two sides cannot land either side of a step). Skips, with the reason, where there is no GPU.
 */

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { capturesArgument } from '../../../src/backends/cuda/ops/block-mask.js';
import { loadKernels } from '../../../src/backends/cuda/runtime/compile.js';
import { cudaAvailable } from '../../../src/backends/cuda/runtime/context.js';
import { i32, launchKernel, ptr } from '../../../src/backends/cuda/runtime/launch.js';
import { reloadConfig } from '../../../src/config.js';
import { Random } from '../../../src/tensor/random.js';
import { Tensor } from '../../../src/tensor/tensor.js';
import { compileModifiers } from '../../../src/variants/compile.js';
import { alibi, and, causal, documentMask, relativeBias, softcap } from '../../../src/variants/library.js';
import { type MaskMod, maskMod, type ScoreMod, scoreMod } from '../../../src/variants/modifiers.js';
import { modifierPrelude } from '../../../src/variants/prelude.js';

const cuda = cudaAvailable();
const skip = cuda.ok ? false : `no CUDA device: ${cuda.reason}`;
const [B, N, T, S] = [2, 4, 64, 80];
const NAME = 'attnlab_modifier_values';
const FOLDED = 'attnlab_modifier_folded';

function check(make: (device: 'cpu' | 'cuda') => { score?: ScoreMod; mask?: MaskMod }): void {
  const host = compileModifiers(make('cpu').score, make('cpu').mask, { B, N, T, S }, 'cpu');
  const { score, mask } = make('cuda');
  const device = compileModifiers(score, mask, { B, N, T, S }, 'cuda');
  assert.equal(device.key, host.key);
  const prelude = modifierPrelude(device, undefined);
  assert.ok(prelude);
  const module = loadKernels({ file: 'variants/modifier_values.cu', kernels: [NAME, FOLDED], prelude });
  const fn = module.functions.get(NAME);
  const foldedFn = module.functions.get(FOLDED);
  assert.ok(fn !== undefined && foldedFn !== undefined);
  const random = new Random(3);
  const count = 4096;
  const points = new Int32Array(count * 4);
  const scores = new Float32Array(count);
  const grads = new Float32Array(count);
  for (let i = 0; i < count; i++) {
    points.set(
      [random.nextUint32() % B, random.nextUint32() % N, random.nextUint32() % T, random.nextUint32() % S],
      4 * i,
    );
    scores[i] = (random.nextUint32() / 2 ** 32 - 0.5) * 8;
    grads[i] = random.nextUint32() / 2 ** 32 - 0.5;
  }
  const up = (data: Int32Array | Float32Array, dtype: 'int32' | 'float32') =>
    Tensor.fromRaw(data, [data.length], dtype).to('cuda');
  const [p, s, g] = [up(points, 'int32'), up(scores, 'float32'), up(grads, 'float32')];
  const modified = Tensor.zeros([count], 'float32').to('cuda');
  const dscores = Tensor.zeros([count], 'float32').to('cuda');
  const dfrom = Tensor.zeros([count], 'float32').to('cuda');
  // The gradient from the modified score (the Hopper backward's form where the generator finds one).
  const fromOutput = device.cudaSource.includes('#define ATTNLAB_SCORE_MOD_GRAD_FROM_OUTPUT 1');
  const kept = Tensor.zeros([count], 'bool').to('cuda');
  const captureGrads = device.captures.map((c) => Tensor.zeros(c.tensor.shape, 'float32').to('cuda'));
  launchKernel(fn, { grid: [Math.ceil(count / 128), 1, 1], block: [128, 1, 1] }, [
    ptr(p.buffer.ptr),
    ptr(s.buffer.ptr),
    ptr(g.buffer.ptr),
    ptr(modified.buffer.ptr),
    ptr(dscores.buffer.ptr),
    ptr(dfrom.buffer.ptr),
    ptr(kept.buffer.ptr),
    capturesArgument(
      device,
      captureGrads.map((t, i) => (device.captures[i].needsGrad ? t.buffer.ptr : 0n)),
    ),
    i32(count),
  ]);
  const folded = Tensor.zeros([count], 'float32').to('cuda');
  launchKernel(foldedFn, { grid: [Math.ceil(count / 128), 1, 1], block: [128, 1, 1] }, [
    ptr(p.buffer.ptr),
    ptr(s.buffer.ptr),
    ptr(folded.buffer.ptr),
    capturesArgument(device, []),
    i32(count),
  ]);
  const [mod, ds, dsFrom, keep, fold] = [
    modified.toFloat64Array(),
    dscores.toFloat64Array(),
    dfrom.toFloat64Array(),
    kept.toHost().data as Uint8Array,
    folded.toFloat64Array(),
  ];
  const hostGrads = host.captures.map((c) => new Float64Array(c.needsGrad ? c.tensor.size : 0));
  const near = (a: number, b: number) => a === b || Math.abs(a - b) <= 1e-5 * Math.max(1, Math.abs(b));
  for (let i = 0; i < count; i++) {
    const [b, h, q, kv] = points.subarray(4 * i, 4 * i + 4);
    if (host.scoreMod) {
      const want = host.scoreMod(scores[i], b, h, q, kv);
      assert.ok(near(mod[i], want), `score_mod at ${i}`);
      assert.ok(near(fold[i], want), `folded score_mod at ${i}: ${fold[i]} vs ${want}`);
    }
    if (host.scoreModGrad) {
      const want = host.scoreModGrad(scores[i], grads[i], b, h, q, kv, hostGrads);
      assert.ok(near(ds[i], want), `backward at ${i}: ${ds[i]} vs ${want}`);
      // y's float32 rounding, carried through the inverted steps, stays well inside the same 1e-5.
      if (fromOutput)
        assert.ok(near(dsFrom[i], want), `backward from the output at ${i}: ${dsFrom[i]} vs ${want}`);
    }
    if (host.maskMod) assert.equal(keep[i] === 1, host.maskMod(b, h, q, kv), `mask_mod at ${i}`);
  }
  device.captures.forEach((c, slot) => {
    if (!c.needsGrad) return;
    const got = captureGrads[slot].toFloat64Array();
    hostGrads[slot].forEach((w, x) => {
      assert.ok(Math.abs(got[x] - w) <= 1e-4 * Math.max(1, Math.abs(w)), `d${c.name}[${x}]`);
    });
  });
}

describe('generated modifier functions equal the CPU evaluator', { skip }, () => {
  const ids = Array.from({ length: B * S }, (_, i) => Math.floor((i % S) / 13));
  const table = Array.from({ length: N * 9 }, (_, i) => Math.sin(i));
  it('alibi + documents and causal', () =>
    check((d) => ({
      score: alibi(Tensor.fromArray([0.5, 0.25, 0.125, 0.0625], [N], 'float32').to(d)),
      mask: and(documentMask(Tensor.fromArray(ids, [B, S], 'int32').to(d)), causal()),
    })));
  it('softcap (and its gradient from the capped score)', () => check(() => ({ score: softcap(2.5) })));
  it('constant factors in and out, folded (ATTNLAB_FOLD_SCORE_FACTORS=1: softcap, tanh(score · 0.25) · 3, score / 8)', () => {
    const saved = process.env.ATTNLAB_FOLD_SCORE_FACTORS;
    process.env.ATTNLAB_FOLD_SCORE_FACTORS = '1';
    reloadConfig();
    try {
      check(() => ({ score: softcap(2.5) }));
      check(() => ({ score: scoreMod('tanh(score * 0.25) * 3.0') }));
      check(() => ({ score: scoreMod('score / 8.0') }));
    } finally {
      if (saved === undefined) delete process.env.ATTNLAB_FOLD_SCORE_FACTORS;
      else process.env.ATTNLAB_FOLD_SCORE_FACTORS = saved;
      reloadConfig();
    }
  });
  it('an exp chain (its gradient from the output: inverted + and ×)', () =>
    check(() => ({ score: scoreMod('2.0 * exp(score / 4.0) + 1.0') })));
  it('relativeBias (learned: atomics into its gradient)', () =>
    check((d) => ({ score: relativeBias(Tensor.fromArray(table, [N, 9], 'float32').to(d)) })));
  it('every operator and function', () =>
    check(() => ({
      score: scoreMod(
        'q % 3 == 0 ? exp(score / 4.0) * sqrt(abs(score) + 1.0) : max(min(score, 2.0), -2.0) + log(float(kv + 1)) - floor(score) + ceil(score / 2.0) + float(int(score * 4.0)) + float((q - kv) / 7)',
      ),
      mask: maskMod('!(q < kv) || (kv / 5) % 2 == 1 && h != 2'),
    })));
});
