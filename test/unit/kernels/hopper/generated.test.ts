/**
 * The generated Hopper headers are their generators' output: regenerating changes nothing.
 * src/kernels/hopper/gen/wgmma.cuh from gen/wgmma.py (needs python3, skips without it), and
 * gen/fwd_variants.cuh from the variant table (src/backends/cuda/flash/sm90/hopper-table.ts).
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import {
  hopperConfigName,
  hopperTableVariants,
  hopperVariantsHeader,
} from '../../../../src/backends/cuda/flash/sm90/hopper-table.js';
import { hopperSharedBytes } from '../../../../src/backends/cuda/flash/sm90/hopper-variant.js';
import { kernelsDir } from '../../../../src/backends/cuda/runtime/compile.js';

const gen = join(kernelsDir(), 'hopper/gen');
const python = spawnSync('python3', ['--version']).status === 0;

describe('generated Hopper kernel headers', () => {
  it('gen/wgmma.cuh is what gen/wgmma.py prints', { skip: python ? false : 'python3 not on PATH' }, () => {
    const run = spawnSync('python3', [join(gen, 'wgmma.py')], { encoding: 'utf8' });
    assert.equal(run.status, 0, run.stderr);
    assert.ok(
      run.stdout === readFileSync(join(gen, 'wgmma.cuh'), 'utf8'),
      'gen/wgmma.cuh differs from its generator: python3 src/kernels/hopper/gen/wgmma.py > src/kernels/hopper/gen/wgmma.cuh',
    );
  });

  it('gen/fwd_variants.cuh is the variant table as written by scripts/gen-hopper-variants.ts', () => {
    assert.ok(
      hopperVariantsHeader() === readFileSync(join(gen, 'fwd_variants.cuh'), 'utf8'),
      'gen/fwd_variants.cuh is stale: node --import tsx scripts/gen-hopper-variants.ts',
    );
  });

  it('names each table variant once, with its shared memory for the compile-time check', () => {
    const header = hopperVariantsHeader();
    const variants = hopperTableVariants();
    assert.ok(variants.length >= 12, `${variants.length} variants`);
    const names = variants.map(hopperConfigName);
    assert.equal(new Set(names).size, names.length);
    for (const v of variants) {
      const name = hopperConfigName(v);
      assert.match(header, new RegExp(`struct ${name} \\{[^}]*shared_bytes = ${hopperSharedBytes(v)};`));
      assert.match(header, new RegExp(`static_assert\\(hopper_smem_bytes<HopperConfig<${name}>>\\(\\)`));
      assert.match(header, new RegExp(`  X\\(${name}\\)`));
    }
    // The kinds of kernel the table chooses are all there.
    for (const kind of ['_dyn_', '192x80x4wg', 'd64_192x128x4wg', '_bias_f32_mask', 'd192v128', 'f16_'])
      assert.ok(
        names.some((n) => n.includes(kind)),
        kind,
      );
  });
});
