/**
 * The launch-parameter structs as the compiler lays them out, against the TypeScript marshalling:
 * FlashParams (src/kernels/flash/params.cuh, included as the kernels include it) and SoftmaxParams
 * (softmax_rows.cuh), the fused flash backward's FlashBwdParams (flash/bwd_params.cuh), the gradient
 * NaN repair's GradRepairParams (ops/grad_repair_params.cuh) and the backward's five structs (softmax_backward.cu). Every scalar's offset, size and kind (pointer, integer, float) and the struct's size
 * must agree, so a field added, moved or retyped on one side only fails here rather than on the GPU.
 * Skips, saying why, without nvcc or a C++ compiler.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { validateAttention } from '../../src/api/validate.js';
import { buildFlashParams, marshalFlashParams } from '../../src/backends/cuda/flash/params.js';
import { marshalFlashBwdParams } from '../../src/backends/cuda/flash/sm80/backward-params.js';
import { softmaxFields } from '../../src/backends/cuda/naive/softmax.js';
import {
  biasGradFields,
  groupSumFields,
  nonFiniteDvFields,
  nonFiniteFields,
  softmaxBackwardFields,
} from '../../src/backends/cuda/naive/softmax-backward.js';
import { gradientRepairFields } from '../../src/backends/cuda/ops/gradient-nan-repair.js';
import { kernelsDir } from '../../src/backends/cuda/runtime/compile.js';
import { Tensor } from '../../src/tensor/tensor.js';
import { compileStructLayout, layoutMismatches, structCompiler, structMembers } from '../support/c-layout.js';

const compiler = structCompiler();
const skip = 'reason' in compiler ? compiler.reason : false;
const scratch = mkdtempSync(join(tmpdir(), 'attnlab-struct-layout-'));
after(() => rmSync(scratch, { recursive: true, force: true }));

function problem() {
  const q = Tensor.zeros([2, 8, 4, 64]);
  const k = Tensor.zeros([2, 9, 2, 64]);
  return validateAttention(q, k, k, { isCausal: true, localWindowSize: [5, 0] });
}

describe('launch-parameter structs: compiler vs TypeScript', { skip }, () => {
  it('FlashParams of params.cuh is what marshalFlashParams writes', () => {
    const header = readFileSync(join(kernelsDir(), 'flash/params.cuh'), 'utf8');
    const layout = compileStructLayout({
      prelude: '#include "flash/params.cuh"',
      name: 'FlashParams',
      members: structMembers(header, 'FlashParams'),
      includeDir: kernelsDir(),
      scratch,
    });
    const zero = { q: 1n, k: 2n, v: 3n, o: 4n, lse: 0n, bias: 0n, mask: 0n, qLens: 0n, kvLens: 0n };
    const arg = marshalFlashParams(buildFlashParams(problem(), zero));
    assert.ok(arg.type === 'struct');
    assert.deepEqual(layoutMismatches(layout, arg.fields), []);
    console.log(`# FlashParams: ${layout.size} B, ${layout.scalars.length} scalars`);
  });

  it('FlashBwdParams of bwd_params.cuh is what marshalFlashBwdParams writes', () => {
    const header = readFileSync(join(kernelsDir(), 'flash/bwd_params.cuh'), 'utf8');
    const layout = compileStructLayout({
      prelude: '#include "flash/bwd_params.cuh"',
      name: 'FlashBwdParams',
      members: structMembers(header, 'FlashBwdParams'),
      includeDir: kernelsDir(),
      scratch,
    });
    const pointers = {
      dOutput: 1n,
      lse2: 2n,
      dsum: 3n,
      dqAccum: 0n,
      dQuery: 4n,
      dKey: 5n,
      dValue: 6n,
      outputFloat32: 7n,
    };
    const arg = marshalFlashBwdParams(pointers, 0.125, 128);
    assert.ok(arg.type === 'struct');
    assert.deepEqual(layoutMismatches(layout, arg.fields), []);
  });

  it('GradRepairParams of grad_repair_params.cuh is what gradientRepairFields writes', () => {
    const header = readFileSync(join(kernelsDir(), 'ops/grad_repair_params.cuh'), 'utf8');
    const layout = compileStructLayout({
      prelude: '#include "ops/grad_repair_params.cuh"',
      name: 'GradRepairParams',
      members: structMembers(header, 'GradRepairParams'),
      includeDir: kernelsDir(),
      scratch,
    });
    const pointers = { dOutput: 1n, dQuery: 2n, dKey: 3n, dValue: 4n, dBias: 5n };
    const arg = gradientRepairFields(pointers, 0.125, [1, 4, 8, 9]);
    assert.ok(arg.type === 'struct');
    assert.deepEqual(layoutMismatches(layout, arg.fields), []);
  });

  it('SoftmaxParams of softmax_rows.cuh is what softmaxFields writes', () => {
    const source = readFileSync(join(kernelsDir(), 'naive/softmax_rows.cuh'), 'utf8');
    const struct = /struct SoftmaxParams \{[\s\S]*?\n\};/.exec(source)![0];
    const layout = compileStructLayout({
      prelude: struct,
      name: 'SoftmaxParams',
      members: structMembers(source, 'SoftmaxParams'),
      includeDir: kernelsDir(),
      scratch,
    });
    const fields = softmaxFields(problem(), {
      scores: 1n,
      probs: 2n,
      lse: 0n,
      queryLengths: 0n,
      keyValueLengths: 0n,
    });
    assert.deepEqual(layoutMismatches(layout, fields), []);
  });

  it("softmax_backward.cu's five structs are what their field builders write", () => {
    const source = readFileSync(join(kernelsDir(), 'naive/softmax_backward.cu'), 'utf8');
    const layoutOf = (name: string) =>
      compileStructLayout({
        prelude: /struct \w+ \{[\s\S]*?\n\};/g.exec(source.slice(source.indexOf(`struct ${name} {`)))![0],
        name,
        members: structMembers(source, name),
        includeDir: kernelsDir(),
        scratch,
      });
    const q = Tensor.zeros([2, 8, 4, 64]);
    const bias = validateAttention(q, q, q, { bias: Tensor.zeros([1, 4, 8, 8]) });
    const cases: Array<[string, ReturnType<typeof groupSumFields>]> = [
      ['SoftmaxBackwardParams', softmaxBackwardFields({ dScores: 3n, dScoresLow: 0n })],
      ['BiasGradParams', biasGradFields(bias, 1n, 2n)],
      ['GroupSumParams', groupSumFields(1n, 2n, { rows: 18, K: 2, G: 2, D: 64 })],
      ['NonFiniteParams', nonFiniteFields(1n, 2n, 4096)],
      ['NonFiniteDvParams', nonFiniteDvFields(1n, 2n, 3n, { N: 4, T: 8, S: 9, Hv: 64 })],
    ];
    for (const [name, fields] of cases) assert.deepEqual(layoutMismatches(layoutOf(name), fields), [], name);
  });
});
