/**
 * src/kernels/variants/nvcc_test_modifiers.cuh is what the generator emits for its modifier set
 * (regenerate with: node --import tsx -e "import('./test/support/variants-nvcc.ts').then(m => process.stdout.write(m.nvccTestHeader()))").
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { it } from 'node:test';
import { kernelsDir } from '../../../src/backends/cuda/runtime/kernel-source.js';
import { NVCC_HEADER, nvccTestHeader } from '../../support/variants-nvcc.js';

it('the committed nvcc test header equals the generated source', () => {
  assert.equal(readFileSync(join(kernelsDir(), NVCC_HEADER), 'utf8'), nvccTestHeader());
});
