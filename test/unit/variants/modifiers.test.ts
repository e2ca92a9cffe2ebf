/**
 * Modifier expressions: parsing and typing errors, the CPU evaluator and its reverse-mode gradient, the
 * generated CUDA functions, and the options on attention() against the equivalent dense mask and bias.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { attention } from '../../../src/api/attention.js';
import { validateAttention } from '../../../src/api/validate.js';
import { InvalidArgumentError, UnsupportedError } from '../../../src/errors.js';
import { randomNormal } from '../../../src/tensor/random.js';
import { Tensor } from '../../../src/tensor/tensor.js';
import { compileModifiers } from '../../../src/variants/compile.js';
import { causal, slidingWindow, softcap } from '../../../src/variants/library.js';
import { maskMod, scoreMod } from '../../../src/variants/modifiers.js';

const sizes = { B: 2, N: 3, T: 5, S: 6 };
const int32 = (values: number[], shape: number[]) => Tensor.fromArray(values, shape, 'int32');
const f32 = (values: number[], shape: number[]) => Tensor.fromArray(values, shape, 'float32');

function refusal(run: () => unknown): InvalidArgumentError {
  try {
    run();
  } catch (e) {
    assert.ok(e instanceof InvalidArgumentError, String(e));
    return e;
  }
  assert.fail('expected an InvalidArgumentError');
}

describe('bad expressions are refused before compiling, naming the modifier and the token', () => {
  const docIds = int32([0, 0, 1, 1, 1, 2], [1, 6]);
  const cases: [string, () => unknown, string, RegExp][] = [
    ['a stray operator', () => maskMod('kv <= q &&'), "maskMod 'custom'", /'\(end\)' at column 11/],
    ['an unknown name', () => maskMod('kv <= qq'), "maskMod 'custom'", /'qq' at column 7/],
    ['a character', () => maskMod('kv <= q @ 1'), "maskMod 'custom'", /'@' at column 9/],
    ['score in a mask', () => maskMod('score > 0'), "maskMod 'custom'", /'score'/],
    ['a number as a mask', () => maskMod('kv - q'), "maskMod 'custom'", /an int expression/],
    ['a boolean as a score', () => scoreMod('score > 0'), "scoreMod 'custom'", /boolean/],
    ['a missing index', () => maskMod('docIds[b] == 0', { docIds }), "maskMod 'custom'", /'docIds'/],
    ['a float index', () => maskMod('docIds[b, q / 2.0] == 0', { docIds }), "maskMod 'custom'", /'docIds'/],
    ['&& on numbers', () => maskMod('q && kv'), "maskMod 'custom'", /'&&'/],
    ['% on floats', () => scoreMod('score % 2'), "scoreMod 'custom'", /'%'/],
    ['wrong arity', () => scoreMod('min(score)'), "scoreMod 'custom'", /'min'/],
    ['a named modifier', () => maskMod('kv <=', {}, { name: 'mine' }), "maskMod 'mine'", /'\(end\)'/],
    ['not a string', () => maskMod(3 as never), "maskMod 'custom'", /3/],
    ['an empty string', () => maskMod('  '), "maskMod 'custom'", / {2}/],
    ['a number glued to a name', () => scoreMod('score * 2x'), "scoreMod 'custom'", /'2x'/],
  ];
  for (const [name, run, argument, token] of cases) {
    it(name, () => {
      const e = refusal(run);
      assert.equal(e.argument, argument);
      assert.match(e.message, token);
    });
  }
  it('captures: dtype, rank, names and learn', () => {
    assert.equal(
      refusal(() => maskMod('x[q] > 0', { x: Tensor.zeros([4], 'float64') })).argument,
      "maskMod 'custom' captures.x.dtype",
    );
    assert.equal(
      refusal(() => maskMod('x[q] > 0', { q: int32([1], [1]) })).argument,
      "maskMod 'custom' captures",
    );
    assert.equal(
      refusal(() => scoreMod('score', { t: int32([1], [1]) }, { learn: ['t'] })).argument,
      "scoreMod 'custom' learn",
    );
    assert.equal(
      refusal(() => maskMod('x[q, q, q, q, q] > 0', { x: Tensor.zeros([1, 1, 1, 1, 1], 'int32') })).argument,
      "maskMod 'custom' captures.x",
    );
  });
  it('a capture indexed by a bare letter must cover its range', () => {
    const m = maskMod('docIds[b, kv] == 0', { docIds });
    assert.doesNotThrow(() => compileModifiers(undefined, m, { B: 1, N: 1, T: 4, S: 6 }, 'cpu'));
    assert.doesNotThrow(() => compileModifiers(undefined, m, { B: 3, N: 1, T: 4, S: 6 }, 'cpu')); // b broadcasts
    const e = refusal(() => compileModifiers(undefined, m, { B: 1, N: 1, T: 4, S: 7 }, 'cpu'));
    assert.match(e.message, /indexed by kv\) of size S=7 or 1/);
  });
});

describe('the CPU evaluator', () => {
  it('follows C semantics for ints: truncating division, remainder, division by zero gives 0', () => {
    const m = compileModifiers(
      scoreMod('float((q - kv) / 2 + (q - kv) % 3 + q / (kv - kv))'),
      undefined,
      sizes,
      'cpu',
    );
    assert.equal(m.scoreMod?.(0, 0, 0, 0, 5), Math.trunc(-5 / 2) + (-5 % 3) + 0);
    assert.equal(m.scoreMod?.(0, 0, 0, 4, 1), 1 + 0);
  });
  it('reads captures with broadcast on size-1 dimensions and refuses an index out of range', () => {
    const slopes = f32([0.5, 0.25, 0.125], [3]);
    const docIds = int32([0, 0, 1, 1, 1, 2], [1, 6]);
    const m = compileModifiers(
      scoreMod('score + slopes[h] * (kv - q)', { slopes }),
      maskMod('docIds[b, q] == docIds[b, kv]', { docIds }),
      sizes,
      'cpu',
    );
    assert.equal(m.scoreMod?.(1, 0, 2, 4, 1), 1 + 0.125 * -3);
    assert.equal(m.maskMod?.(1, 0, 2, 4), true); // b = 1 reads row 0 (broadcast)
    assert.equal(m.maskMod?.(0, 0, 1, 2), false);
    assert.deepEqual(
      m.captures.map((c) => [c.name, c.dtype, c.strides]),
      [
        ['slopes', 'float32', [1, 0, 0, 0]],
        ['docIds', 'int32', [0, 1, 0, 0]],
      ],
    );
    const far = compileModifiers(undefined, maskMod('docIds[b, q + kv] == 0', { docIds }), sizes, 'cpu');
    assert.match(refusal(() => far.maskMod?.(0, 0, 4, 3)).message, /index 7 on dimension 1/);
  });
  it('differentiates by reverse mode: score and learned captures against finite differences', () => {
    const table = f32([0.1, -0.2, 0.3, 0.4, 0.5, -0.6], [2, 3]);
    const slopes = f32([0.3, -0.7], [2]);
    const expr =
      '20.0 * tanh((score * score / 3.0 + table[h, min(abs(kv - q), 2)] * exp(slopes[h] * score)) / 20.0)' +
      ' + (q > kv ? sqrt(abs(score) + 1.0) : log(score * score + 2.0)) - max(score, slopes[h]) + float(kv)';
    const two = { ...sizes, N: 2 };
    const mods = compileModifiers(
      scoreMod(expr, { table, slopes }, { learn: ['table'] }),
      undefined,
      two,
      'cpu',
    );
    const f = mods.scoreMod;
    const grad = mods.scoreModGrad;
    assert.ok(f && grad);
    for (const [s, b, h, q, kv] of [
      [0.7, 0, 1, 3, 1],
      [-1.3, 1, 0, 0, 4],
      [0.2, 0, 1, 2, 2],
    ]) {
      const grads = [new Float64Array(6), new Float64Array(2)];
      const g = 1.7;
      const ds = grad(s, g, b, h, q, kv, grads);
      const eps = 1e-6;
      const numeric = (g * (f(s + eps, b, h, q, kv) - f(s - eps, b, h, q, kv))) / (2 * eps);
      assert.ok(Math.abs(ds - numeric) < 1e-6, `ds ${ds} vs ${numeric}`);
      // d/d table element: perturb the tensor itself through a fresh compile.
      const at = h * 3 + Math.min(Math.abs(kv - q), 2);
      const bumped = (delta: number) => {
        const values = Array.from(table.toFloat64Array());
        values[at] += delta;
        const t = Tensor.fromArray(values, [2, 3], 'float64');
        const m = compileModifiers(
          scoreMod(expr, {
            table: Tensor.fromArray(Array.from(t.toFloat64Array()), [2, 3], 'float32'),
            slopes,
          }),
          undefined,
          two,
          'cpu',
        );
        return m.scoreMod?.(s, b, h, q, kv) ?? Number.NaN;
      };
      const dTable = (g * (bumped(1e-3) - bumped(-1e-3))) / 2e-3;
      assert.ok(Math.abs(grads[0][at] - dTable) < 1e-4, `dTable ${grads[0][at]} vs ${dTable}`);
      assert.equal(
        grads[0].reduce((a, x) => a + Math.abs(x), 0),
        Math.abs(grads[0][at]),
      );
      assert.deepEqual(Array.from(grads[1]), [0, 0], 'slopes is not learned');
    }
  });
});

describe('the generated CUDA', () => {
  it('defines the three functions and the macros, hashes the source, and keys the mask alone', () => {
    const slopes = f32([0.5, 0.25, 0.125], [3]);
    const a = compileModifiers(
      scoreMod('score + slopes[h] * (kv - q)', { slopes }),
      maskMod('kv <= q'),
      sizes,
      'cpu',
    );
    for (const text of [
      '#define ATTNLAB_SCORE_MOD 1',
      '#define ATTNLAB_MASK_MOD 1',
      '#define ATTNLAB_CAPTURE_GRADS 0',
      'struct AttnlabCaptures',
      '__device__ __forceinline__ float attnlab_score_mod(float s, int b, int h, int q, int kv, const AttnlabCaptures& c)',
      '__device__ __forceinline__ bool attnlab_mask_mod(int b, int h, int q, int kv, const AttnlabCaptures& c)',
      '__device__ __forceinline__ float attnlab_score_mod_backward(float s, float g, int b, int h, int q, int kv, const AttnlabCaptures& c)',
    ]) {
      assert.ok(a.cudaSource.includes(text), text);
    }
    assert.match(a.key, /^[0-9a-f]{16}$/);
    const b = compileModifiers(
      scoreMod('score + slopes[h] * (kv - q)', { slopes }),
      maskMod('kv < q'),
      sizes,
      'cpu',
    );
    assert.notEqual(a.key, b.key);
    const c = compileModifiers(scoreMod('score * 2.0'), maskMod('kv <= q'), sizes, 'cpu');
    assert.equal(a.maskKey, c.maskKey);
    assert.notEqual(a.key, c.key);
    const none = compileModifiers(undefined, maskMod('kv <= q'), sizes, 'cpu');
    assert.ok(none.cudaSource.includes('#define ATTNLAB_SCORE_MOD 0'));
    assert.ok(none.cudaSource.includes('{ return s; }'));
  });
  it('atomically adds a learned capture gradient only under ATTNLAB_CAPTURE_GRADS', () => {
    const table = f32([0, 0, 0, 0, 0, 0], [2, 3]);
    const m = compileModifiers(
      scoreMod('score + table[h, min(abs(kv - q), 2)]', { table }, { learn: ['table'] }),
      undefined,
      { ...sizes, N: 2 },
      'cpu',
    );
    assert.ok(m.cudaSource.includes('#define ATTNLAB_CAPTURE_GRADS 1'));
    assert.match(
      m.cudaSource,
      /#if ATTNLAB_CAPTURE_GRADS\n {2}atomicAdd\(c\.grad\[0\] \+ o\d+, a\d+\);\n#endif/,
    );
    assert.equal(m.captures[0].needsGrad, true);
  });
});

describe('attention() with modifiers', () => {
  const [B, T, S, N, K, H] = [2, 5, 6, 4, 2, 8];
  const q = randomNormal([B, T, N, H], { seed: 1, dtype: 'float64' });
  const k = randomNormal([B, S, K, H], { seed: 2, dtype: 'float64' });
  const v = randomNormal([B, S, K, H], { seed: 3, dtype: 'float64' });
  const close = (a: Tensor, b: Tensor) => {
    const [x, y] = [a.toFloat64Array(), b.toFloat64Array()];
    assert.equal(x.length, y.length);
    for (let i = 0; i < x.length; i++) assert.ok(Math.abs(x[i] - y[i]) < 1e-12, `${i}: ${x[i]} vs ${y[i]}`);
  };
  it('a maskMod equals the dense boolean mask it describes', () => {
    const docIds = int32([0, 0, 1, 1, 1, 2, 0, 1, 1, 2, 2, 2], [B, S]);
    const m = maskMod('docIds[b, q] == docIds[b, kv] && kv <= q + 1', { docIds });
    const dense: boolean[] = [];
    const ids = docIds.toFloat64Array();
    for (let b = 0; b < B; b++)
      for (let t = 0; t < T; t++)
        for (let s = 0; s < S; s++) dense.push(ids[b * S + t] === ids[b * S + s] && s <= t + 1);
    const mask = Tensor.fromArray(dense.map(Number), [B, 1, T, S], 'bool');
    const a = attention(q, k, v, { maskMod: m, implementation: 'reference', returnLogSumExp: true });
    const b = attention(q, k, v, { mask, implementation: 'reference', returnLogSumExp: true });
    close(a.output, b.output);
    assert.deepEqual(
      Array.from(a.logSumExp?.toFloat64Array() ?? []),
      Array.from(b.logSumExp?.toFloat64Array() ?? []),
    );
  });
  it('a scoreMod equals the dense bias it adds (ALiBi), also as an expression string', () => {
    const slopes = f32([0.5, 0.25, 0.125, 0.0625], [N]);
    const bias: number[] = [];
    for (let n = 0; n < N; n++)
      for (let t = 0; t < T; t++) for (let s = 0; s < S; s++) bias.push(Math.fround(2 ** -(n + 1)) * (s - t));
    const dense = attention(q, k, v, {
      bias: Tensor.fromArray(bias, [1, N, T, S], 'float64'),
      implementation: 'reference',
    });
    const mod = attention(q, k, v, {
      scoreMod: scoreMod('score + slopes[h] * (kv - q)', { slopes }),
      implementation: 'reference',
    });
    close(mod.output, dense.output);
    const causal = attention(q, k, v, { isCausal: true, implementation: 'reference' });
    const asString = attention(q, k, v, { maskMod: 'kv <= q', implementation: 'reference' });
    close(asString.output, causal.output);
  });
  it('auto picks a backend that takes modifiers; one that does not refuses with the reason', () => {
    assert.equal(attention(q, k, v, { maskMod: 'kv <= q' }).backend, 'flash');
    assert.throws(
      () => attention(q, k, v, { maskMod: 'kv <= q', implementation: 'webgpu' }),
      (e: unknown) => e instanceof UnsupportedError || e instanceof InvalidArgumentError,
    );
  });
  it('refuses a modifier of the wrong kind, a capture on another device, and a block mask without its maskMod', () => {
    assert.equal(
      refusal(() => attention(q, k, v, { scoreMod: maskMod('kv <= q') as never })).argument,
      'scoreMod',
    );
    assert.equal(refusal(() => attention(q, k, v, { maskMod: 'score > 0' })).argument, "maskMod 'custom'");
    assert.equal(refusal(() => attention(q, k, v, { blockMask: {} as never })).argument, 'blockMask');
  });
});

describe('ready-made causal and window masks run as the built-in masks', () => {
  const [B, T, N, H] = [1, 6, 2, 4];
  const q = randomNormal([B, T, N, H], { seed: 5, dtype: 'float64' });
  it('causal() and slidingWindow() become isCausal and the window in top-left alignment, only there', () => {
    const causalProblem = validateAttention(q, q, q, { maskMod: causal() });
    assert.equal(causalProblem.causal, true);
    assert.equal(causalProblem.modifiers, undefined);
    const windowed = validateAttention(q, q, q, { maskMod: slidingWindow(2, 1), localWindowSize: [1, 3] });
    assert.deepEqual(windowed.window, { left: 1, right: 1 });
    assert.equal(windowed.modifiers, undefined);
    const withScore = validateAttention(q, q, q, { maskMod: causal(), scoreMod: softcap(5) });
    assert.equal(withScore.causal, true);
    assert.equal(withScore.modifiers?.hasMaskMod, false);
    assert.equal(withScore.modifiers?.hasScoreMod, true);
    // bottom_right shifts the built-in diagonal; the modifier's kv <= q does not move: kept as a modifier.
    const shifted = validateAttention(q, q, q, { maskMod: causal(), causalAlignment: 'bottom_right' });
    assert.equal(shifted.causal, false);
    assert.equal(shifted.modifiers?.hasMaskMod, true);
    // The same expression written by hand stays a modifier (it is evaluated, and must equal the built-in).
    const written = validateAttention(q, q, q, { maskMod: 'kv <= q' });
    assert.equal(written.modifiers?.hasMaskMod, true);
    const a = attention(q, q, q, { maskMod: 'kv <= q', implementation: 'reference' }).output.toFloat64Array();
    const b = attention(q, q, q, { maskMod: causal(), implementation: 'reference' }).output.toFloat64Array();
    assert.deepEqual(Array.from(a), Array.from(b));
  });
});

describe('modifiers on packed sequences', () => {
  it('q and kv are positions within each sequence: a written causal mask equals isCausal on packed inputs', () => {
    const [N, H] = [2, 8];
    const offsets = [0, 5, 12, 20];
    const total = offsets[offsets.length - 1];
    const q = randomNormal([total, N, H], { seed: 41, dtype: 'float64' });
    const k = randomNormal([total, N, H], { seed: 42, dtype: 'float64' });
    const v = randomNormal([total, N, H], { seed: 43, dtype: 'float64' });
    const layout = { querySeqOffsets: offsets, keyValueSeqOffsets: offsets };
    for (const implementation of ['reference', 'flash'] as const) {
      const written = attention(q, k, v, {
        ...layout,
        maskMod: 'kv <= q',
        implementation,
      }).output.toFloat64Array();
      const builtin = attention(q, k, v, {
        ...layout,
        isCausal: true,
        implementation,
      }).output.toFloat64Array();
      assert.deepEqual(Array.from(written), Array.from(builtin), implementation);
    }
  });
});

describe('literals and piecewise-constant functions', () => {
  it('true and false are boolean literals; floor and ceil pass no gradient', () => {
    const sizes2 = { B: 1, N: 1, T: 4, S: 4 };
    const m = compileModifiers(
      scoreMod('floor(score) + ceil(score * 2.0) + score'),
      maskMod('q == 0 ? true : false'),
      sizes2,
      'cpu',
    );
    assert.equal(m.maskMod?.(0, 0, 0, 3), true);
    assert.equal(m.maskMod?.(0, 0, 1, 0), false);
    assert.equal(m.scoreMod?.(1.25, 0, 0, 0, 0), 1 + 3 + 1.25);
    assert.equal(m.scoreModGrad?.(1.25, 2, 0, 0, 0, 0, []), 2);
    assert.ok(m.cudaSource.includes('= true;') && m.cudaSource.includes('= false;'));
    assert.equal(
      refusal(() => maskMod('x[q] > 0', { true: int32([1], [1]) })).argument,
      "maskMod 'custom' captures",
    );
  });
});
