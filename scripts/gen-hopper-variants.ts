/**
 * Writes src/kernels/hopper/gen/fwd_variants.cuh from the Hopper forward's variant table
 * (src/backends/cuda/flash/sm90/hopper-table.ts). Run from the repository root after changing the table:
 *   node --import tsx scripts/gen-hopper-variants.ts
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { hopperVariantsHeader } from '../src/backends/cuda/flash/sm90/hopper-table.js';
import { kernelsDir } from '../src/backends/cuda/runtime/compile.js';

const path = join(kernelsDir(), 'hopper/gen/fwd_variants.cuh');
writeFileSync(path, hopperVariantsHeader());
console.log(`wrote ${path}`);
