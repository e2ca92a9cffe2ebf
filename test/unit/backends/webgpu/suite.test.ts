/**
 * The correctness suite on the webgpu backend (on a software adapter here; on the GPU machine's
 * Vulkan driver there) against the float64 oracle, through the runner every backend uses, with
 * the outputs read back asynchronously. Skips, saying why, where no WebGPU device opens.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { attention } from '../../../../src/api/attention.js';
import { webgpuBackend } from '../../../../src/backends/webgpu/backend.js';
import { runForward } from '../../../../src/backends/webgpu/forward.js';
import { CASES } from '../../../../src/check/cases.js';
import { buildNanInputs, NAN_CASES } from '../../../../src/check/nan-cases.js';
import { compareNanCase } from '../../../../src/check/nan-pattern.js';
import { PRECISIONS } from '../../../../src/check/suite.js';
import type { Tensor } from '../../../../src/tensor/tensor.js';
import { defineBackendSuite, seedLine } from '../../../support/backend-suite.js';
import { webgpuSkipReason } from '../../../support/webgpu.js';

const skip = await webgpuSkipReason();

describe('suite: webgpu', { skip: skip ?? false }, () => {
  before(() => console.log(seedLine()));
  const rows = defineBackendSuite(webgpuBackend, {
    readback: 'async',
    expect: (row) =>
      assert.match(row.variant ?? '', /^webgpu-flash-(sgmat\w*|decode-s\d+|tiled|plain|subgroups)-/),
  });
  after(() => {
    // Only float64-free precisions run, so nothing of the suite may be refused but by a limit.
    const skipped = rows.filter((r) => r.status === 'skipped');
    for (const r of skipped) console.log(`# skipped ${r.case} · ${r.precision}: ${r.reason}`);
  });
});

// The split-KV path (keys cut into chunks, then merged) on the hand-picked cases, where the plan
// would not split them (S < 512): every rule (empty rows, NaN, padding, windows) through the combine;
// the decode kernel where it applies (T ≤ 16, no bias or mask, a device with subgroups), else the row kernel.
describe('suite: webgpu, split-KV in 3', { skip: skip ?? false }, () => {
  defineBackendSuite(webgpuBackend, {
    cases: CASES,
    precisions: [PRECISIONS.float32, PRECISIONS.float16],
    readback: 'async',
    run: (problem) => runForward(problem, { splits: 3 }),
    label: ', 3 splits',
    expect: (row) => assert.match(row.variant ?? '', /-split(-|$)/),
  });
});

// The row kernels where the tiled one would run: one lane (plain), which adapters without
// subgroups run, and two lanes (subgroups), on the hand-picked cases.
describe('suite: webgpu, plain kernel', { skip: skip ?? false }, () => {
  defineBackendSuite(webgpuBackend, {
    cases: CASES,
    precisions: [PRECISIONS.float32],
    readback: 'async',
    run: (problem) => runForward(problem, { subgroups: false, tiled: false }),
    label: ', plain',
    expect: (row) => assert.match(row.variant ?? '', /^webgpu-flash-plain-/),
  });
});

describe('suite: webgpu, rows kernel with subgroups', { skip: skip ?? false }, () => {
  defineBackendSuite(webgpuBackend, {
    cases: CASES,
    precisions: [PRECISIONS.float16],
    readback: 'async',
    run: (problem) => runForward(problem, { tiled: false, decode: false }),
    label: ', rows',
    expect: (row) => assert.match(row.variant ?? '', /^webgpu-flash-(plain|subgroups)-/),
  });
});

// The tiled kernel without subgroups (one invocation runs each row's softmax), which adapters
// without the feature run; the row kernel where the tiled one does not apply.
describe('suite: webgpu, tiled plain kernel (no subgroups)', { skip: skip ?? false }, () => {
  defineBackendSuite(webgpuBackend, {
    cases: CASES,
    precisions: [PRECISIONS.float32],
    readback: 'async',
    run: (problem) => runForward(problem, { subgroups: false }),
    label: ', tiled plain',
    expect: (row) => assert.match(row.variant ?? '', /^webgpu-flash-(tiled|plain)-(?!subgroups)/),
  });
});

// The tiled kernel where the subgroup-matrix one would run (float16 on a device with f16 subgroup
// matrices, ATTNLAB_WEBGPU_EXPERIMENTAL=1): the fallback of adapters without them, on the same cases.
describe('suite: webgpu, tiled kernel without subgroup matrices', { skip: skip ?? false }, () => {
  defineBackendSuite(webgpuBackend, {
    cases: CASES,
    precisions: [PRECISIONS.float16],
    readback: 'async',
    run: (problem) => runForward(problem, { sgmat: false }),
    label: ', no sgmat',
    expect: (row) => assert.doesNotMatch(row.variant ?? '', /sgmat/),
  });
});

// The NaN/Inf rule (docs/guide/attention.md): every case of src/check/nan-cases.ts on the device
// (the tiled kernel where it applies), against the float32 reference of the same clean inputs.
// float16 runs the subgroup-matrix kernel where the device has it (T = 80, H = 64): its −0 weights and
// its scalar P·V for a V tile with an Inf or NaN; 2e-2 covers float16 outputs of magnitude ≤ 4.
for (const [dtype, tolerance] of [
  ['float32', 1e-4],
  ['float16', 2e-2],
] as const) {
  describe(`webgpu: NaN and Inf reach exactly the rows that see them, ${dtype}`, {
    skip: skip ?? false,
  }, () => {
    for (const c of NAN_CASES) {
      it(c.name, async () => {
        const clean = buildNanInputs(c, dtype, 1200, false);
        const poisoned = buildNanInputs(c, dtype, 1200, true);
        const options = { ...poisoned.options };
        if (options.bias) options.bias = options.bias.to('webgpu');
        if (options.mask) options.mask = options.mask.to('webgpu');
        const [q, k, v] = [poisoned.q, poisoned.k, poisoned.v].map((t) => t.to('webgpu'));
        const r = attention(q, k, v, { ...options, implementation: 'webgpu', returnLogSumExp: true });
        const want = attention(clean.q, clean.k, clean.v, {
          ...clean.options,
          implementation: 'reference',
          returnLogSumExp: true,
        });
        const cmp = compareNanCase(
          c,
          await r.output.toFloat64ArrayAsync(),
          await (r.logSumExp as Tensor).toFloat64ArrayAsync(),
          want.output.toFloat64Array(),
          (want.logSumExp as Tensor).toFloat64Array(),
          tolerance,
        );
        for (const t of [q, k, v, r.output, r.logSumExp, options.bias, options.mask]) t?.dispose();
        assert.ok(cmp.ok, `${r.variant}: ${cmp.message}`);
      });
    }
  });
}
