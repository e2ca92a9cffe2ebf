/**
 * What the CUDA generator does to keep an expression cheap in the kernels' loops (src/variants/cuda.ts;
 * docs/internals/variants.md "What an expression costs on the GPU"): the interval analysis behind the
 * int-to-float conversions, the reads at positions that keep a kernel's per-score test, tanh and
 * division by a literal. The source text is checked; the GPU suites check the values.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { reloadConfig } from '../../../src/config.js';
import { Tensor } from '../../../src/tensor/tensor.js';
import { compileModifiers } from '../../../src/variants/compile.js';
import { intRanges, readsAtPositions, scoreScales } from '../../../src/variants/cuda.js';
import { alibi, relativeBias, softcap } from '../../../src/variants/library.js';
import { maskMod, scoreMod } from '../../../src/variants/modifiers.js';
import { lower } from '../../../src/variants/program.js';

const sizes = { B: 2, N: 4, T: 64, S: 64 };
const source = (score: ReturnType<typeof scoreMod>) =>
  compileModifiers(score, undefined, sizes, 'cpu').cudaSource;
/** The score function's body lines. */
const body = (text: string) =>
  text.slice(text.indexOf('float attnlab_score_mod('), text.indexOf('float attnlab_score_mod_backward('));

describe('variants CUDA generator: the cost of an expression', () => {
  it('intRanges bounds ints by the positions (q, kv < 2^22), b and h (< 2^16) and the operations', () => {
    const program = lower(
      scoreMod('score + float(kv - q) + float(kv + q) + float(b * 3 - h) + float(kv * kv)').tree,
    );
    const ranges = intRanges(program).filter((r) => r !== null);
    const has = (lo: number, hi: number) => ranges.some((r) => r?.[0] === lo && r?.[1] === hi);
    assert.ok(has(-(2 ** 22 - 1), 2 ** 22 - 1), 'kv − q');
    assert.ok(has(0, 2 ** 23 - 2), 'kv + q');
    assert.ok(has(-65535, 3 * 65535), 'b·3 − h');
    // kv·kv may pass int32: any value.
    assert.ok(has(Number.NEGATIVE_INFINITY, Number.POSITIVE_INFINITY), 'kv·kv');
    const clamped = lower(scoreMod('score + float(min(max(kv - q, -8), 8) % 5)').tree);
    assert.ok(intRanges(clamped, Number.POSITIVE_INFINITY).some((r) => r?.[0] === -4 && r?.[1] === 4));
  });

  it('converts ints inside ±2^22 with attnlab_small_i2f, others with a cast', () => {
    const text = body(source(scoreMod('score + float(kv - q) + float(kv + q)')));
    assert.match(text, /attnlab_small_i2f\(v\d+\)/);
    assert.match(text, /\(float\)v\d+/);
    assert.equal(text.match(/attnlab_small_i2f/g)?.length, 1);
    // ALiBi: its kv − q is the small conversion.
    assert.match(body(source(alibi(4))), /slopes|c\.ptr\[0\]/);
    assert.match(body(source(alibi(4))), /attnlab_small_i2f/);
  });

  it('marks the reads at unbounded positions, which keep a kernel per-score test', () => {
    const reads = (e: string, captures: Record<string, Tensor>) =>
      readsAtPositions(lower(scoreMod(e, captures).tree));
    const t = Tensor.zeros([2, 64], 'float32');
    assert.equal(reads('score + t[b, kv]', { t }), true);
    assert.equal(reads('score + t[b, q + 1]', { t }), true);
    assert.equal(reads('score + t[b, min(max(kv - q, -3), 3) + 3]', { t }), false);
    assert.equal(reads('score + t[h, b]', { t }), false);
    assert.equal(reads('score * float(kv)', { t }), false);
    const defines = (m: ReturnType<typeof scoreMod>) =>
      /#define ATTNLAB_SCORE_MOD_READS_POSITIONS (\d)/.exec(source(m))?.[1];
    assert.equal(defines(alibi(4)), '0');
    assert.equal(defines(softcap(30)), '0');
    assert.equal(defines(relativeBias(Tensor.zeros([4, 9], 'float32'))), '0');
    assert.equal(defines(scoreMod('score + t[b, kv]', { t })), '1');
    const maskOnly = compileModifiers(undefined, maskMod('kv <= q'), sizes, 'cpu').cudaSource;
    assert.match(maskOnly, /#define ATTNLAB_SCORE_MOD_READS_POSITIONS 0/);
  });

  it('tanh through attnlab_tanh (tanh.approx.f32 under ATTNLAB_FAST_TANH), x / literal as a product', () => {
    const text = source(softcap(30));
    assert.match(body(text), /attnlab_tanh\(/);
    assert.doesNotMatch(body(text), /tanhf\(/);
    assert.match(body(text), /\* 0\.0333333\d*f/);
    assert.doesNotMatch(body(text), / \/ /);
    assert.match(text, /#if ATTNLAB_FAST_TANH\n[^#]*tanh\.approx\.f32[^#]*#else\n\s*return tanhf\(x\);/);
    // A literal whose reciprocal is not a normal float32 keeps the division.
    assert.match(body(source(scoreMod('score / 1e-39'))), / \/ /);
    // Division by a non-literal stays a division.
    assert.match(body(source(scoreMod('score / float(kv + 1)'))), / \/ /);
  });

  it('takes constant factors of the score and of the result out for the kernels to fold (softcap: 1/c in, c out)', () => {
    const scales = (e: string, captures: Record<string, Tensor> = {}) =>
      scoreScales(lower(scoreMod(e, captures).tree));
    assert.deepEqual(scales('30.0 * tanh(score / 30.0)'), {
      input: 3,
      inScale: 1 / 30,
      output: 5,
      outScale: 30,
      outArg: 4,
    });
    assert.equal(scales('tanh(score * 0.5) * 4.0')?.inScale, 0.5);
    assert.equal(scales('tanh(score * 0.5) * 4.0')?.outScale, 4);
    assert.equal(scales('tanh(score / 7.0) / 0.25')?.outScale, 4);
    // The score alone, scaled: the input fold only.
    assert.deepEqual(scales('score * 0.5'), { input: 2, inScale: 0.5, output: null, outScale: 1, outArg: 2 });
    // Nothing to fold: an additive modifier, the score used twice, a negative or non-constant factor.
    const t = Tensor.zeros([4], 'float32');
    assert.equal(scales('score + t[h] * float(kv - q)', { t }), null);
    assert.equal(scales('score * 0.5 + score'), null);
    assert.equal(scales('-2.0 * tanh(score + 1.0)'), null);
    assert.equal(scales('t[h] * tanh(score + 1.0)', { t }), null);
    assert.equal(scales('score / 1e-39'), null);
    // The source, where ATTNLAB_FOLD_SCORE_FACTORS=1 asks for it (not by default): the factors as
    // defines, the folded function without the two multiplies.
    assert.doesNotMatch(source(softcap(30)), /FOLDED/);
    const saved = process.env.ATTNLAB_FOLD_SCORE_FACTORS;
    process.env.ATTNLAB_FOLD_SCORE_FACTORS = '1';
    reloadConfig();
    let text: string;
    try {
      text = source(softcap(30));
      assert.doesNotMatch(source(alibi(4)), /FOLDED/);
    } finally {
      if (saved === undefined) delete process.env.ATTNLAB_FOLD_SCORE_FACTORS;
      else process.env.ATTNLAB_FOLD_SCORE_FACTORS = saved;
      reloadConfig();
    }
    assert.match(
      text,
      /#define ATTNLAB_SCORE_MOD_FOLDED 1\n#define ATTNLAB_SCORE_MOD_IN_SCALE 0\.0333333\d*f\n#define ATTNLAB_SCORE_MOD_OUT_SCALE 30\.0f/,
    );
    const folded = text.slice(text.indexOf('float attnlab_score_mod_folded('));
    assert.match(folded, /const float v3 = s;\n\s*const float v4 = attnlab_tanh\(v3\);\n\s*return v4;/);
  });

  it("says whether the backward reads the score, and gives it from the modifier's output where it can", () => {
    const flag = (text: string, name: string) =>
      new RegExp(`#define ATTNLAB_SCORE_MOD_${name} (\\d)`).exec(text)?.[1];
    const fromOutput = (text: string) => {
      const start = text.indexOf('float attnlab_score_mod_backward_from_output(');
      return text.slice(start, text.indexOf('\n}', start));
    };
    const table = Tensor.zeros([4, 9], 'float32');
    // Additive modifiers: the gradient is g; the backward skips recomputing the raw score.
    for (const m of [alibi(4), relativeBias(table), scoreMod('score * 2.0 + float(kv)')]) {
      assert.equal(flag(source(m), 'NEEDS_SCORE'), '0');
      assert.equal(flag(source(m), 'GRAD_FROM_OUTPUT'), '0');
    }
    // softcap: 1 − t² with t = y · (1/c), no second tanh and no read of s.
    const capped = source(softcap(30));
    assert.equal(flag(capped, 'NEEDS_SCORE'), '1');
    assert.equal(flag(capped, 'GRAD_FROM_OUTPUT'), '1');
    const inverse = fromOutput(capped);
    assert.match(inverse, /const float v\d+ = y;/);
    assert.match(inverse, /= v\d+ \* 0\.0333333\d*f;/);
    assert.match(inverse, /1\.0f - v\d+ \* v\d+/);
    assert.doesNotMatch(inverse, /attnlab_tanh|\bs\b/);
    // exp after affine steps: inverted through + 1 and × 2.
    const exp = source(scoreMod('2.0 * exp(score / 4.0) + 1.0'));
    assert.equal(flag(exp, 'GRAD_FROM_OUTPUT'), '1');
    assert.match(fromOutput(exp), /- \(float\)v\d+;/);
    assert.doesNotMatch(fromOutput(exp), /expf/);
    // Not of that form: two nonlinear steps, the score used twice, a score-dependent divisor, a
    // captured multiplier above the tanh (it may be 0), a learned capture.
    const slopes = Tensor.zeros([4], 'float32');
    for (const m of [
      scoreMod('tanh(tanh(score))'),
      scoreMod('score * tanh(score)'),
      scoreMod('1.0 / tanh(score)'),
      scoreMod('slopes[h] * tanh(score)', { slopes }),
      scoreMod('tanh(score) + t[h, 0]', { t: table }, { learn: ['t'] }),
    ]) {
      assert.equal(flag(source(m), 'GRAD_FROM_OUTPUT'), '0', m.expression);
      assert.equal(flag(source(m), 'NEEDS_SCORE'), '1', m.expression);
      assert.match(fromOutput(source(m)), /const float ds = g;/);
    }
  });
});
