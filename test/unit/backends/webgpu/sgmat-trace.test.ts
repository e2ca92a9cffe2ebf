/**
 * Reading the sgmat kernel's trace (src/backends/webgpu/sgmat-trace.ts) on the CPU: a section's
 * comparison names its first wrong value and its blocks, and the fit of a wrong score block names
 * the partial products it holds — an accumulator not cleared between key blocks, q's rows where
 * K's should be, a block transposed — with a residual near zero, and a residual near one where the
 * block is noise.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { checkInputs } from '../../../../src/backends/webgpu/sgmat-check.js';
import { bestShift, compareSection, explainScoreBlock } from '../../../../src/backends/webgpu/sgmat-trace.js';

const H = 64;
const M = 16;
const N = 16;
const K = 16;
const BC = 64;
const ROWS = 64;
const { q, k } = checkInputs();

/** Scores of rows × BC keys from `a`'s rows against `b`'s, over head dims [h0, h1). */
function product(a: Float64Array, b: Float64Array, h0 = 0, h1 = H): Float64Array {
  const s = new Float64Array(ROWS * BC);
  for (let i = 0; i < ROWS; i++)
    for (let j = 0; j < BC; j++) {
      let x = 0;
      for (let d = h0; d < h1; d++) x += a[i * H + d] * b[j * H + d];
      s[i * BC + j] = x;
    }
  return s;
}

describe('the sgmat trace, read on the CPU', () => {
  const right = product(q, k);

  it('names the first wrong value and the blocks that hold one', () => {
    const got = Float64Array.from(right);
    got[17 * BC + 40] += 1;
    got[50 * BC + 3] -= 2;
    const c = compareSection(got, right, BC, 0, { M, N });
    assert.equal(c.wrong, 2);
    assert.equal(c.maxError, 2);
    assert.deepEqual(c.first, {
      index: 17 * BC + 40,
      row: 17,
      col: 40,
      got: right[17 * BC + 40] + 1,
      want: right[17 * BC + 40],
    });
    assert.deepEqual(c.badBlocks, ['1,2', '3,0']);
  });

  it('fits a block accumulated over the key blocks before it', () => {
    // Block (1, 2) as an accumulator never cleared leaves it: key blocks 0, 1 and 2 summed.
    const got = Float64Array.from(right);
    for (let i = M; i < 2 * M; i++)
      for (let j = 0; j < N; j++)
        got[i * BC + 2 * N + j] = right[i * BC + j] + right[i * BC + N + j] + right[i * BC + 2 * N + j];
    const fit = explainScoreBlock(got, BC, 1, 2, { q, k, H, M, N, K });
    assert.ok(fit.residualRel < 1e-6, JSON.stringify(fit));
    for (const c of [0, 1, 2]) for (let h = 0; h < H / K; h++) assert.equal(fit.terms[`qk ${c} ${h}`], 1);
    assert.equal(Object.keys(fit.terms).length, 3 * (H / K));
  });

  it("fits q's rows read where K's should be, and a head block missing", () => {
    const stale = product(q, q);
    const partial = product(q, k, 0, 3 * K);
    const got = Float64Array.from(right);
    for (let i = 0; i < M; i++)
      for (let j = 0; j < N; j++) {
        got[i * BC + N + j] = stale[i * BC + N + j];
        got[(2 * M + i) * BC + 3 * N + j] = partial[(2 * M + i) * BC + 3 * N + j];
      }
    const staleFit = explainScoreBlock(got, BC, 0, 1, { q, k, H, M, N, K });
    assert.ok(staleFit.residualRel < 1e-6, JSON.stringify(staleFit));
    assert.deepEqual(staleFit.terms, { 'qq 1 0': 1, 'qq 1 1': 1, 'qq 1 2': 1, 'qq 1 3': 1 });
    const partialFit = explainScoreBlock(got, BC, 2, 3, { q, k, H, M, N, K });
    assert.deepEqual(partialFit.terms, { 'qk 3 0': 1, 'qk 3 1': 1, 'qk 3 2': 1 });
  });

  it('fits a transposed block, and leaves noise unexplained', () => {
    const got = Float64Array.from(right);
    // Block (1, 1) transposed: element (i, j) holds (j, i).
    for (let i = 0; i < M; i++)
      for (let j = 0; j < N; j++) got[(M + i) * BC + N + j] = right[(M + j) * BC + N + i];
    const fit = explainScoreBlock(got, BC, 1, 1, { q, k, H, M, N, K });
    assert.ok(fit.residualRel < 1e-6, JSON.stringify(fit));
    assert.deepEqual(fit.terms, { 'kqT 1 0': 1, 'kqT 1 1': 1, 'kqT 1 2': 1, 'kqT 1 3': 1 });
    let seed = 7;
    for (let i = 0; i < M; i++)
      for (let j = 0; j < N; j++) {
        seed = (seed * 1103515245 + 12345) % 2 ** 31;
        got[i * BC + j] = (seed / 2 ** 31) * 80 - 40;
      }
    assert.ok(explainScoreBlock(got, BC, 0, 0, { q, k, H, M, N, K }).residualRel > 0.5);
  });
});

describe('the sgmat trace fit, operand blocks transposed', () => {
  it('names a product whose K operand was loaded transposed (col_major ignored)', () => {
    const got = new Float64Array(ROWS * BC);
    // Block (0, 2) as Σ_h q(0, h)·B'_h with B'_h[t][j] = k[2·N + t][h·K + j].
    for (let i = 0; i < M; i++)
      for (let j = 0; j < N; j++) {
        let x = 0;
        for (let h = 0; h < H / K; h++)
          for (let t = 0; t < K; t++) x += q[i * H + h * K + t] * k[(2 * N + t) * H + h * K + j];
        got[i * BC + 2 * N + j] = x;
      }
    const fit = explainScoreBlock(got, BC, 0, 2, { q, k, H, M, N, K });
    assert.ok(fit.residualRel < 1e-6, JSON.stringify(fit));
    assert.deepEqual(fit.terms, { 'qkB 2 0': 1, 'qkB 2 1': 1, 'qkB 2 2': 1, 'qkB 2 3': 1 });
  });

  it('names the element shift of a section read a few elements off its reference', () => {
    // K's rows as a matrix load 4 f16 before its address reads them from a tile with zero padding.
    const shifted = Float64Array.from(k.slice(0, BC * H), (_, e) => (e % H >= 4 ? k[e - 4] : 0));
    assert.deepEqual(bestShift(shifted, k.slice(0, BC * H), H), { shift: 4, explained: 1 });
    assert.deepEqual(bestShift(k.slice(0, BC * H), k.slice(0, BC * H), H), { shift: 0, explained: 1 });
    const right = product(q, k);
    const early = Float64Array.from(right, (_, e) => (e % BC < BC - 1 ? right[e + 1] : 0));
    assert.deepEqual(bestShift(early, right, BC), { shift: -1, explained: 1 });
    // Noise is explained by no shift.
    assert.ok(bestShift(q.slice(0, BC * H), k.slice(0, BC * H), H).explained < 0.1);
  });
});
