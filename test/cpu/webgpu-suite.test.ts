/**
 * The correctness suite on the webgpu backend (on a software adapter here; on the GPU machine's
 * Vulkan driver there) against the float64 oracle, through the runner every backend uses, with
 * the outputs read back asynchronously. Skips, saying why, where no WebGPU device opens.
 */
import assert from 'node:assert/strict';
import { after, before, describe } from 'node:test';
import { webgpuBackend } from '../../src/backends/webgpu/backend.js';
import { defineBackendSuite, seedLine } from '../support/backend-suite.js';
import { webgpuSkipReason } from '../support/webgpu.js';

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
