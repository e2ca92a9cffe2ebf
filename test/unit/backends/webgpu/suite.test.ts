/**
 * The correctness suite on the webgpu backend (on a software adapter here; on the GPU machine's
 * Vulkan driver there) against the float64 oracle, through the runner every backend uses, with
 * the outputs read back asynchronously. Skips, saying why, where no WebGPU device opens.
 */
import assert from 'node:assert/strict';
import { after, before, describe } from 'node:test';
import { webgpuBackend } from '../../../../src/backends/webgpu/backend.js';
import { runForward } from '../../../../src/backends/webgpu/forward.js';
import { CASES } from '../../../../src/check/cases.js';
import { PRECISIONS } from '../../../../src/check/suite.js';
import { defineBackendSuite, seedLine } from '../../../support/backend-suite.js';
import { webgpuSkipReason } from '../../../support/webgpu.js';

const skip = await webgpuSkipReason();

describe('suite: webgpu', { skip: skip ?? false }, () => {
  before(() => console.log(seedLine()));
  const rows = defineBackendSuite(webgpuBackend, {
    readback: 'async',
    expect: (row) => assert.match(row.variant ?? '', /^webgpu-flash-(plain|subgroups)-/),
  });
  after(() => {
    // Only float64-free precisions run, so nothing of the suite may be refused but by a limit.
    const skipped = rows.filter((r) => r.status === 'skipped');
    for (const r of skipped) console.log(`# skipped ${r.case} · ${r.precision}: ${r.reason}`);
  });
});

// The split-KV path (keys cut into chunks, then merged) on the hand-picked cases, where the plan
// would not split them (S < 512): every rule (empty rows, NaN, padding, windows) through the combine.
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

// The one-lane (plain) kernel, which adapters without subgroups run, on the hand-picked cases.
describe('suite: webgpu, plain kernel', { skip: skip ?? false }, () => {
  defineBackendSuite(webgpuBackend, {
    cases: CASES,
    precisions: [PRECISIONS.float32],
    readback: 'async',
    run: (problem) => runForward(problem, { subgroups: false }),
    label: ', plain',
    expect: (row) => assert.match(row.variant ?? '', /^webgpu-flash-plain-/),
  });
});
