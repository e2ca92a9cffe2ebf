/**
 * The flash backend's Hopper kernel against the compiler: HopperParams (hopper/fwd_params.cuh) as
 * nvcc (or the host C++ compiler) lays it out, and hopper_fwd.cu compiled for sm_90a with the -D set
 * the backend gives a case, without spills. Each test skips, saying why, without the compiler it needs.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { validateAttention } from '../../src/api/validate.js';
import { HOPPER_PARAMS_BYTES } from '../../src/backends/cuda/flash/sm90/hopper.js';
import {
  HOPPER_KERNEL,
  type HopperVariant,
  hopperDefines,
  hopperVariant,
  hopperVariantKey,
} from '../../src/backends/cuda/flash/sm90/hopper-variant.js';
import { compileOptions, kernelsDir } from '../../src/backends/cuda/runtime/compile.js';
import type { AttentionProblem } from '../../src/backends/problem.js';
import { reloadConfig } from '../../src/config.js';
import type { FloatDType } from '../../src/tensor/dtype.js';
import { randomNormal } from '../../src/tensor/random.js';
import { compileStructLayout, structCompiler } from '../support/c-layout.js';
import {
  alibiCase,
  causalCase,
  compiledModifiers,
  documentCase,
  type ModifierCase,
  softcapCase,
} from '../support/modifier-cases.js';

function problem(H: number, dtype: FloatDType, Hv = H) {
  const q = randomNormal([2, 8, 4, H], { seed: 1, dtype });
  const k = randomNormal([2, 8, 2, H], { seed: 2, dtype });
  const v = randomNormal([2, 8, 2, Hv], { seed: 3, dtype });
  return validateAttention(q, k, v, {});
}

/** The problem with a hand-written modifier set (and a block mask's presence: its kinds stay null). */
function modified(H: number, m: ModifierCase, blockMask: boolean): AttentionProblem {
  const mask = blockMask ? { kinds: { ptr: 0n }, Bm: 1, Nm: 1, blockQ: 128, blockKV: 128 } : null;
  return {
    ...problem(H, 'bfloat16'),
    modifiers: compiledModifiers(m, []),
    blockMask: mask,
  } as unknown as AttentionProblem;
}

describe('cuda flash: the Hopper (wgmma) kernel against the compiler', () => {
  const compiler = structCompiler();
  it('lays HopperParams out as the compiler does: maps at 0/128/256, FlashParams at 384, the work counter at 664, 704 bytes', {
    skip: 'reason' in compiler ? compiler.reason : false,
  }, () => {
    const kernel = readFileSync(join(kernelsDir(), 'hopper/fwd_params.cuh'), 'utf8');
    const sm90 = readFileSync(join(kernelsDir(), 'hopper/sm90.cuh'), 'utf8');
    const struct = (source: string, name: string) =>
      new RegExp(`struct (__align__\\(64\\) )?${name} \\{[\\s\\S]*?\\n\\};`).exec(source)![0];
    const dir = mkdtempSync(join(tmpdir(), 'attnlab-hopper-layout-'));
    try {
      const layout = compileStructLayout({
        prelude: [
          '#include "flash/params.cuh"',
          'typedef unsigned long long u64;',
          struct(sm90, 'TmaDesc'),
          struct(kernel, 'HopperParams'),
        ].join('\n'),
        name: 'HopperParams',
        members: ['tm_q', 'tm_k', 'tm_v', 'f', 'work_counter', 'dynamic_section'],
        includeDir: kernelsDir(),
        scratch: dir,
      });
      assert.equal(layout.size, HOPPER_PARAMS_BYTES);
      assert.deepEqual(
        layout.scalars.map((m) => [m.member, m.offset, m.bytes]),
        [
          ['tm_q', 0, 128],
          ['tm_k', 128, 128],
          ['tm_v', 256, 128],
          ['f', 384, 280],
          ['work_counter', 664, 8],
          ['dynamic_section', 672, 4],
        ],
      );
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  const nvcc = spawnSync('nvcc', ['--version']).status === 0;
  it("compiles with the backend's own defines for sm_90a (D=128 f16, D=192, 192/128, the dynamic grid at D=128 and D=64)", {
    skip: nvcc ? false : 'nvcc not on PATH',
  }, () => {
    for (const [H, Hv, dtype, persistent] of [
      [128, 128, 'float16', false],
      [192, 192, 'bfloat16', false],
      [192, 128, 'bfloat16', false],
      [128, 128, 'bfloat16', 'dynamic'],
      [64, 64, 'bfloat16', 'dynamic'],
    ] as const)
      compileBackendDefines(H, Hv, dtype, persistent);
  });

  // The modifier sets the GPU suite runs (test/support/modifier-cases.ts), each with the variant the
  // backend chooses for it: causal as a mask modifier, ALiBi and soft-capping as score modifiers, a
  // document mask reading an int32 tensor with a block mask, on the 2-D grid and (D ≤ 128, the host's
  // rule from 264 items) on the dynamic grid, whose producer warp classifies the tiles.
  const shape = { B: 2, T: 256, S: 256, N: 4 };
  // The one spill: D=256 with a block mask, 8 bytes on BN=64 (hopper-variant.ts BLOCK_MASK_REGISTERS).
  const cases: Array<[number, ModifierCase, boolean, number, HopperVariant['persistent']]> = [
    [128, causalCase(), false, 0, false],
    [64, alibiCase(shape), false, 0, false],
    [256, softcapCase(30.5), false, 0, false],
    [128, documentCase(shape, 4, 1, true), true, 0, false],
    [64, documentCase(shape, 4, 1, true), true, 0, false],
    [256, documentCase(shape, 4, 1, true), true, 8, false],
    [128, documentCase(shape, 4, 1, true), true, 0, 'dynamic'],
    [64, documentCase(shape, 4, 1, true), true, 0, 'dynamic'],
  ];
  // ATTNLAB_BLOCK_MASK_TILE=64x64: one consumer at 232 registers, two blocks an SM (128 registers a
  // thread at launch), so the launch count matters as much as the spills.
  for (const H of [128, 64])
    it(`compiles a document mask with a block mask on the 64 × 64 one-consumer tile at H=${H} for sm_90a, 128 registers at launch, no spill`, {
      skip: nvcc ? false : 'nvcc not on PATH',
    }, () => {
      const m = documentCase(shape, 4, 1, true);
      const saved = process.env.ATTNLAB_BLOCK_MASK_TILE;
      process.env.ATTNLAB_BLOCK_MASK_TILE = '64x64';
      reloadConfig();
      try {
        const choice = hopperVariant(modified(H, m, true), 'sm_90a', 'wgmma', null);
        assert.ok('variant' in choice, JSON.stringify(choice));
        assert.equal(choice.variant.consumers, 1);
        assert.equal(choice.variant.blockN, 64);
        assert.equal(choice.variant.pingpong, false);
        const registers = compileSpec(`${m.name} H=${H} 64x64`, hopperDefines(choice.variant), m.source, 0);
        assert.ok(
          registers <= 128,
          `${registers} registers a thread at launch: two blocks of 256 threads need ≤ 128`,
        );
      } finally {
        if (saved === undefined) delete process.env.ATTNLAB_BLOCK_MASK_TILE;
        else process.env.ATTNLAB_BLOCK_MASK_TILE = saved;
        reloadConfig();
      }
    });
  for (const [H, m, blockMask, spill, persistent] of cases)
    it(`compiles ${m.name} at H=${H}${persistent ? ' on the dynamic grid' : ''} for sm_90a, the modifier source first, spilling at most ${spill} bytes`, {
      skip: nvcc ? false : 'nvcc not on PATH',
    }, () => {
      const choice = hopperVariant(modified(H, m, blockMask), 'sm_90a', 'wgmma', null);
      assert.ok('variant' in choice, JSON.stringify(choice));
      assert.match(
        hopperVariantKey(choice.variant),
        new RegExp(`\\.mods-${m.key}${blockMask ? '\\.bmask' : ''}\\.wgmma$`),
      );
      compileSpec(`${m.name} H=${H}`, hopperDefines({ ...choice.variant, persistent }), m.source, spill);
    });
});

/**
 * nvcc compiles hopper_fwd.cu with the -D set the backend gives the case (H, Hv, dtype), and ptxas
 * fits the library's tile in registers without spilling (hopperTiles' register rule).
 */
function compileBackendDefines(
  H: number,
  Hv: number,
  dtype: FloatDType,
  persistent: HopperVariant['persistent'],
) {
  const choice = hopperVariant(problem(H, dtype, Hv), 'sm_90a', 'wgmma', null);
  assert.ok('variant' in choice);
  const spec = {
    file: HOPPER_KERNEL.file,
    kernels: [HOPPER_KERNEL.name],
    defines: hopperDefines({ ...choice.variant, persistent }),
  };
  // The macros the entry's variant struct reads (hopper_fwd.cu HopperFwdVariant).
  const source = readFileSync(join(kernelsDir(), spec.file), 'utf8');
  const entry = /struct HopperFwdVariant \{[\s\S]*?\n\};/.exec(source)?.[0] ?? '';
  assert.ok(entry, 'hopper_fwd.cu defines HopperFwdVariant');
  for (const macro of new Set(entry.match(/HOPPER_[A-Z0-9_]+/g)))
    assert.ok(macro in spec.defines, `hopper_fwd.cu reads ${macro}, hopperDefines lacks it`);
  compileSpec(`H=${H} Hv=${Hv}`, spec.defines);
}

/**
 * nvcc compiles hopper_fwd.cu for sm_90a with `defines` (and `prelude` included first, as NVRTC
 * compiles a modifier set's source before the file), and ptxas reports no spill.
 */
function compileSpec(name: string, defines: Record<string, number>, prelude?: string, spill = 0): number {
  const dir = mkdtempSync(join(tmpdir(), 'attnlab-hopper-'));
  try {
    const options = compileOptions({ file: HOPPER_KERNEL.file, kernels: [], defines }, 'sm_90a');
    const args = ['-cubin', '-gencode=arch=compute_90a,code=sm_90a', '-std=c++17', '-Xptxas', '-v'];
    const include: string[] = [];
    if (prelude) {
      writeFileSync(join(dir, 'prelude.cuh'), prelude);
      include.push('-include', join(dir, 'prelude.cuh'));
    }
    const file = join(kernelsDir(), HOPPER_KERNEL.file);
    const result = spawnSync(
      'nvcc',
      [
        ...args,
        '-I',
        kernelsDir(),
        ...include,
        ...options.filter((o) => o.startsWith('-D')),
        '-o',
        join(dir, 'k.cubin'),
        file,
      ],
      { encoding: 'utf8' },
    );
    assert.equal(result.status, 0, `${name}: ${result.stderr}`);
    const kernel =
      /Function properties for attnlab_hopper_fwd\n\s*\d+ bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads/.exec(
        result.stderr,
      );
    assert.ok(kernel, result.stderr);
    assert.ok(
      Number(kernel[1]) <= spill,
      `${name} spills ${kernel[1]} bytes (at most ${spill}):\n${result.stderr}`,
    );
    const used = /Function properties for attnlab_hopper_fwd[\s\S]*?Used (\d+) registers/.exec(result.stderr);
    assert.ok(used, result.stderr);
    return Number(used[1]);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
