/**
 * The NaN/Inf rule of docs/guide/attention.md on the CPU backends: every case of src/check/nan-cases.ts, the reference
 * exactly (the poison must change nothing it does not reach, bit for bit) and the CPU flash within
 * float64 rounding, plus the two against each other on the NaN pattern.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { attention } from '../../../src/api/attention.js';
import { validateAttention } from '../../../src/api/validate.js';
import { type AttentionBackend, NO_PLAN, runPlanned } from '../../../src/backends/backend.js';
import { fp8Support } from '../../../src/backends/cuda/fp8/support.js';
import { canHideKeys, withNanRepair } from '../../../src/backends/cuda/ops/nan-repair.js';
import type { AttentionOptions } from '../../../src/backends/problem.js';
import { buildNanInputs, FP8_NAN_CASES, NAN_CASES, poisonsWithInf } from '../../../src/check/nan-cases.js';
import { compareNanCase } from '../../../src/check/nan-pattern.js';
import { runFp8Step } from '../../../src/te/fp8-path.js';
import { Fp8State } from '../../../src/te/fp8-state.js';
import { DelayedScaling, Float8CurrentScaling } from '../../../src/te/recipe.js';
import { Tensor } from '../../../src/tensor/tensor.js';

const SEED = 1200;

for (const implementation of ['reference', 'flash'] as const) {
  describe(`CPU ${implementation}: NaN and Inf reach exactly the rows that see them`, () => {
    for (const c of NAN_CASES) {
      it(c.name, () => {
        const run = (poisoned: boolean) => {
          const { q, k, v, options } = buildNanInputs(c, 'float64', SEED, poisoned);
          const impl = poisoned ? implementation : 'reference';
          return attention(q, k, v, { ...options, implementation: impl, returnLogSumExp: true });
        };
        const clean = run(false);
        const r = run(true);
        const cmp = compareNanCase(
          c,
          r.output.toFloat64Array(),
          r.logSumExp!.toFloat64Array(),
          clean.output.toFloat64Array(),
          clean.logSumExp!.toFloat64Array(),
          implementation === 'reference' ? 0 : 1e-12,
        );
        assert.ok(cmp.ok, cmp.message);
      });
    }
  });
}

describe('FP8 path (CPU emulation): NaN reaches exactly the rows that see it, ±Inf saturates', () => {
  let ran = 0;
  for (const c of FP8_NAN_CASES) {
    for (const recipe of [new Float8CurrentScaling(), new DelayedScaling()]) {
      it(`${c.name} (${recipe.kind})`, (t) => {
        const run = (poisoned: boolean) => {
          const { q, k, v, options } = buildNanInputs(c, 'bfloat16', SEED, poisoned);
          const p = validateAttention(q, k, v, options);
          const support = fp8Support(p, 'emulated');
          if (!support.ok) return support.reason;
          return runFp8Step(p, recipe, new Fp8State(), false).output.toFloat64Array();
        };
        const clean = run(false);
        if (typeof clean === 'string') return t.skip(clean);
        const out = run(true) as Float64Array;
        ran++;
        if (poisonsWithInf(c)) {
          // e4m3 has no infinity: TE's saturating cast makes ±Inf ±448 (scaled), a large finite value.
          const bad = out.findIndex((x) => !Number.isFinite(x));
          assert.equal(bad, -1, `out[${bad}] = ${out[bad]}: an Inf input saturates on the FP8 path`);
          return;
        }
        // The scales skip NaN (amax) and the poisoned entries are 0 in the clean problem, so every
        // element the poison does not reach is the clean problem's, bit for bit.
        const cmp = compareNanCase(c, out, undefined, clean, new Float64Array(0), 0);
        assert.ok(cmp.ok, cmp.message);
      });
    }
  }
  it('ran the value-side cases (causal and padding) rather than refusing them', () => {
    assert.ok(ran >= 16, `only ${ran} FP8 NaN cases ran`);
  });
});

describe('NaN and Inf, hand-checked', () => {
  const f64 = (values: number[], shape: number[]) => Tensor.fromArray(values, shape, 'float64');
  for (const implementation of ['reference', 'flash'] as const) {
    it(`${implementation}: a NaN logit, a +inf logit and a −inf-only row (one row each)`, () => {
      // Three query rows over two keys, scale 1, bias per row: row 0 gets a NaN logit, row 1 a +inf
      // logit, row 2 only −inf logits (it sees nothing).
      const q = f64([1, 1, 1], [1, 3, 1, 1]);
      const k = f64([0, 0], [1, 2, 1, 1]);
      const v = f64([4, 8], [1, 2, 1, 1]);
      const bias = f64([Number.NaN, 0, Number.POSITIVE_INFINITY, 0, -Infinity, -Infinity], [1, 1, 3, 2]);
      const r = attention(q, k, v, { scale: 1, bias, implementation, returnLogSumExp: true });
      const out = [...r.output.toFloat64Array()];
      assert.ok(Number.isNaN(out[0]) && Number.isNaN(out[1]), `rows 0 and 1 NaN, got ${out}`);
      assert.equal(out[2], 0);
      const lse = [...r.logSumExp!.toFloat64Array()];
      assert.ok(Number.isNaN(lse[0]) && Number.isNaN(lse[1]), `lse ${lse}`);
      assert.equal(lse[2], Number.NEGATIVE_INFINITY);
    });

    it(`${implementation}: a masked key's NaN value stays out, a visible one's is NaN even at weight 0`, () => {
      // Keys: 0 visible (logit 0), 1 visible at logit −1e6 (weight underflows to 0), 2 masked by −inf.
      const q = f64([1], [1, 1, 1, 1]);
      const k = f64([0, 0, 0], [1, 3, 1, 1]);
      const v = f64([2, 5, 3, Number.NaN, Number.NaN, Number.NaN], [1, 3, 1, 2]); // (S=3, Hv=2)
      const masked = f64([0, -1e6, -Infinity], [1, 1, 1, 3]);
      const out = attention(q, k, v, { scale: 1, bias: masked, implementation }).output.toFloat64Array();
      assert.equal(out[0], 2); // key 1 adds 0 · 3 (finite), key 2 nothing
      assert.ok(Number.isNaN(out[1]), `column 1 sees key 1's NaN at weight 0: ${out[1]}`);
    });
  }
});

describe('the NaN repair wrapper of the naive and cudnn backends (registry)', () => {
  const problem = (options: AttentionOptions) => {
    const t = Tensor.zeros([1, 4, 1, 8], 'float64');
    return validateAttention(t, t, t, options);
  };

  it('runs the repair only where a key can be hidden from a row', () => {
    assert.equal(canHideKeys(problem({})), false);
    // Nothing hidden: one token decoding bottom-right, lengths that pad nothing, a window wider than
    // the problem (S = T = 4).
    const one = (options: AttentionOptions) => {
      const q = Tensor.zeros([1, 1, 1, 8], 'float64');
      const kv = Tensor.zeros([1, 4, 1, 8], 'float64');
      return validateAttention(q, kv, kv, options);
    };
    assert.equal(canHideKeys(one({ isCausal: true, causalAlignment: 'bottom_right' })), false);
    assert.equal(canHideKeys(one({ isCausal: true })), true, 'top-left: the one query sees key 0 only');
    assert.equal(canHideKeys(problem({ keyValueSeqLengths: [4] })), false);
    assert.equal(canHideKeys(problem({ localWindowSize: [8, 8] })), false);
    assert.equal(canHideKeys(problem({ localWindowSize: [7, 8] })), true);
    for (const options of [
      { isCausal: true },
      { localWindowSize: [1, 1] as [number, number] },
      { keyValueSeqLengths: [3] },
      { bias: Tensor.zeros([1, 1, 4, 4], 'float64') },
      { mask: Tensor.fromRaw(new Uint8Array(16).fill(1), [1, 1, 4, 4], 'bool') },
    ]) {
      assert.equal(canHideKeys(problem(options)), true, JSON.stringify(Object.keys(options)));
    }
  });

  it('is a post-op the entry declares: name, device, plan and run kept, the result kept where nothing is hidden', () => {
    let runs = 0;
    const inner: AttentionBackend<null> = {
      name: 'naive',
      device: 'cuda',
      plan: () => NO_PLAN,
      run: (_plan, p) => {
        runs++;
        return { output: p.query, variant: 'inner' };
      },
    };
    const wrapped = withNanRepair(inner);
    assert.equal(wrapped.name, 'naive');
    assert.equal(wrapped.device, 'cuda');
    assert.equal(wrapped.plan(problem({})), NO_PLAN);
    assert.deepEqual(
      wrapped.postOps?.map((op) => op.name),
      ['nan-repair'],
    );
    assert.equal(inner.postOps, undefined, 'the backend itself is left as it was');
    const p = problem({});
    const r = runPlanned(wrapped, null, p); // no hidden key: no repair launch (which would need a GPU)
    assert.equal(runs, 1);
    assert.equal(r.output, p.query);
    assert.equal(r.variant, 'inner');
  });
});
