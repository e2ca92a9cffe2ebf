/**
 * Writes src/kernels/hopper/gen/fwd_variants.cuh from the Hopper forward's variant table
 * (src/backends/cuda/flash/hopper-table.ts). Run from the repository root after changing the table:
 *   node --import tsx scripts/gen-hopper-variants.ts
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { kernelsDir } from '../src/backends/cuda/compile.js';
import { hopperVariantsHeader } from '../src/backends/cuda/flash/hopper-table.js';

const path = join(kernelsDir(), 'hopper/gen/fwd_variants.cuh');
writeFileSync(path, hopperVariantsHeader());
console.log(`wrote ${path}`);
