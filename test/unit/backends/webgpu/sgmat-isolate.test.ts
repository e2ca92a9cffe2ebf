/**
 * The isolation kernels of src/backends/webgpu/sgmat-isolate.ts: on the CPU, the judge names a
 * wrong value and fits a matrix read a few elements off its address (or a score product with one
 * operand so read) by that shift; on a software adapter (SwiftShader here), every case's WGSL,
 * its matrix operations rewritten into plain WGSL (test/support/sgmat-emulation.ts), builds and
 * stores exactly what the judge expects, so on a GPU a case that differs is the driver's doing.
 * The device part skips, saying why, where no WebGPU device opens.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { webgpuContext } from '../../../../src/backends/webgpu/runtime.js';
import { checkInputs } from '../../../../src/backends/webgpu/sgmat-check.js';
import {
  ISOLATE_CASES,
  type IsolateCase,
  judgeIsolate,
  runIsolate,
} from '../../../../src/backends/webgpu/sgmat-isolate.js';
import { emulateSubgroupMatrix } from '../../../support/sgmat-emulation.js';
import { webgpuSkipReason } from '../../../support/webgpu.js';

const skip = await webgpuSkipReason();
const BC = 64;
const H = 64;
const NVIDIA = { M: 16, N: 16, K: 16, sg: 32 };
const { q, k } = checkInputs();

/** What the load case stores where every matrix load reads `shift` f16 before its address. */
function shiftedLoads(c: IsolateCase, shift: number): Float64Array {
  const tile = new Float64Array((BC + 1) * c.stride);
  for (let key = 0; key < BC; key++) for (let d = 0; d < H; d++) tile[key * c.stride + d] = k[key * H + d];
  const out = new Float64Array(2 * BC * H);
  for (let sg = 0; sg < 2; sg++)
    for (let key = 0; key < BC; key++)
      for (let d = 0; d < H; d++) {
        const at = key * c.stride + d - shift;
        // Before the tile lies another workgroup variable's memory (not zero).
        out[sg * BC * H + key * H + d] = at >= 0 ? tile[at] : 9;
      }
  return out;
}

describe('the isolation kernels, judged on the CPU', () => {
  const load = ISOLATE_CASES[0];
  const scores = ISOLATE_CASES.find((c) => c.scores && !c.kernelVariables) as IsolateCase;

  it('find nothing wrong in an exact load, and name the first wrong value', () => {
    const right = shiftedLoads(load, 0);
    assert.deepEqual(judgeIsolate(load, NVIDIA, right).shifts, {});
    assert.equal(judgeIsolate(load, NVIDIA, right).wrong, 0);
    const got = Float64Array.from(right);
    got[BC * H + 5 * H + 17] += 0.5;
    const r = judgeIsolate(load, NVIDIA, got);
    assert.equal(r.wrong, 1);
    assert.equal(r.maxError, 0.5);
    assert.deepEqual(r.first, {
      index: BC * H + 5 * H + 17,
      sg: 1,
      row: 5,
      col: 17,
      got: right[BC * H + 5 * H + 17] + 0.5,
      want: right[BC * H + 5 * H + 17],
    });
    assert.deepEqual(r.shifts, { none: 1 });
  });

  it('fit every block of loads 4 or 6 f16 early by that shift', () => {
    for (const shift of [4, 6, -4]) {
      const r = judgeIsolate(load, NVIDIA, shiftedLoads(load, shift));
      assert.equal(r.first?.row, 0);
      assert.deepEqual(r.shifts, { [String(shift)]: 2 * (BC / 16) * (H / 16) }, `shift ${shift}`);
    }
  });

  it('fit a result store that lands one f32 early (the fenced layout’s score tile) by shift −1', () => {
    const store = ISOLATE_CASES.find((c) => c.store && !c.lead) as IsolateCase;
    const rows = 2 * NVIDIA.M;
    const tile = new Float64Array((rows + 1) * store.stride);
    for (let i = 0; i < rows; i++) for (let j = 0; j < BC; j++) tile[i * store.stride + j] = k[i * H + j];
    const right = Float64Array.from({ length: rows * BC }, (_, e) => k[Math.floor(e / BC) * H + (e % BC)]);
    assert.equal(judgeIsolate(store, NVIDIA, right).wrong, 0);
    const early = Float64Array.from(right, (_, e) => tile[Math.floor(e / BC) * store.stride + (e % BC) + 1]);
    assert.deepEqual(judgeIsolate(store, NVIDIA, early).shifts, { '-1': 2 * (BC / 16) });
  });

  it("fit a score product whose K operand is read 4 f16 early, and name q's shift apart", () => {
    const rows = 2 * NVIDIA.M;
    const product = (ks: number, qs: number) => {
      const s = new Float64Array(rows * BC);
      for (let i = 0; i < rows; i++)
        for (let j = 0; j < BC; j++) {
          let x = 0;
          for (let d = 0; d < H; d++) {
            const kd = d - ks;
            const qd = d - qs;
            // Reads before a row's start land in the row before's padding (zero) or before the tile.
            const kv = kd >= 0 ? k[j * H + kd] : 0;
            const qv = qd >= 0 ? q[i * H + qd] : 0;
            x += qv * kv;
          }
          s[i * BC + j] = x;
        }
      return s;
    };
    assert.equal(judgeIsolate(scores, NVIDIA, product(0, 0)).wrong, 0);
    assert.deepEqual(judgeIsolate(scores, NVIDIA, product(4, 0)).shifts, { 'k4 q0': 8 });
    assert.deepEqual(judgeIsolate(scores, NVIDIA, product(4, 4)).shifts, { 'k4 q4': 8 });
  });
});

describe('the isolation kernels, matrix operations emulated', { skip: skip ?? false }, () => {
  // 8×8×8 matrices and subgroups of the adapter's size; the kernel's variables for 2 subgroups, so
  // that its tiles fit SwiftShader's 32 KiB in f32 (no shader-f16 there).
  for (const c of ISOLATE_CASES) {
    it(`stores what the judge expects: ${c.name}`, async (t) => {
      const { device, info } = webgpuContext();
      const f32Only = !info.features.includes('shader-f16');
      if (f32Only && c.selfWrite) {
        t.skip('two f32 copies of the tile pass 32 KiB');
        return;
      }
      const shape = { M: 8, N: 8, K: 8, sg: info.subgroupSizes.max, subgroups: 2 };
      const r = await runIsolate(device, c, shape, {
        rewrite: (code) => emulateSubgroupMatrix(code, { f32Only }),
        f32Only,
      });
      assert.ok(typeof r !== 'string', String(r));
      assert.equal(r.wrong, 0, JSON.stringify(r));
      assert.ok(r.of > 0);
    });
  }
});
