/**
 * The flash backend's Hopper path, host side, without a GPU: which case runs on the wgmma kernel
 * and which on mma.sync (the dispatch rule), its variant keys and shared memory, the 704-byte
 * HopperParams, and — with nvcc present — that the backend's own -D set compiles for sm_90a.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { validateAttention } from '../../src/api/validate.js';
import { compileOptions, kernelsDir } from '../../src/backends/cuda/compile.js';
import { HOPPER_PARAMS_BYTES, marshalHopperParams } from '../../src/backends/cuda/flash/hopper.js';
import {
  HOPPER_BY_DEFAULT,
  HOPPER_KERNEL,
  hopperBlockM,
  hopperDefines,
  hopperSharedBytes,
  hopperThreads,
  hopperVariant,
  hopperVariantKey,
} from '../../src/backends/cuda/flash/hopper-variant.js';
import { buildFlashParams, marshalFlashParams } from '../../src/backends/cuda/flash/params.js';
import type { AttentionOptions } from '../../src/backends/problem.js';
import type { FloatDType } from '../../src/tensor/dtype.js';
import { randomNormal } from '../../src/tensor/random.js';
import { compileStructLayout, structCompiler } from '../support/c-layout.js';

function problem(H: number, dtype: FloatDType, options: AttentionOptions = {}, Hv = H) {
  const q = randomNormal([2, 8, 4, H], { seed: 1, dtype });
  const k = randomNormal([2, 8, 2, H], { seed: 2, dtype });
  const v = randomNormal([2, 8, 2, Hv], { seed: 3, dtype });
  return validateAttention(q, k, v, options);
}

/** The variant key on sm_90a (no ATTNLAB_FLASH_KERNEL), or `mma: <reason>`. */
function dispatch(H: number, dtype: FloatDType, options: AttentionOptions = {}, Hv = H, arch = 'sm_90a') {
  const choice = hopperVariant(problem(H, dtype, options, Hv), arch, 'wgmma', null);
  return 'variant' in choice ? hopperVariantKey(choice.variant) : `mma: ${choice.reason}`;
}

describe('cuda flash: the Hopper (wgmma) path', () => {
  it('runs bf16/fp16 H = Hv ∈ {64, 128, 256} on sm_90a, causal or not, MHA/GQA, with lengths', () => {
    assert.equal(dispatch(128, 'bfloat16'), 'flash-fwd.sm_90a.bf16.d128.128x128x3wg.pp.lw.ds.sl8.wgmma');
    assert.equal(dispatch(64, 'float16'), 'flash-fwd.sm_90a.f16.d64.192x128x4wg.pp.lw.ds.sl8.wgmma');
    assert.equal(dispatch(256, 'bfloat16'), 'flash-fwd.sm_90a.bf16.d256.128x80x3wg.pp.lw.ds.sl8.wgmma');
    const lengths = { querySeqLengths: [8, 3], keyValueSeqLengths: [5, 0] };
    for (const options of [
      { isCausal: true },
      { isCausal: true, causalAlignment: 'bottom_right' as const },
      lengths,
      { localWindowSize: [4, 0] as [number, number] },
      { isCausal: true, localWindowSize: [3, 0] as [number, number], ...lengths },
    ]) {
      assert.match(dispatch(128, 'bfloat16', options), /\.wgmma$/);
    }
  });

  it('pads H and Hv up to the kernel head dim where 3/4 of it is real: 96 → 128, 48 → 64, 200 → 256', () => {
    assert.equal(dispatch(96, 'bfloat16'), 'flash-fwd.sm_90a.bf16.d128.128x128x3wg.pp.lw.ds.sl8.wgmma');
    assert.equal(dispatch(200, 'float16'), 'flash-fwd.sm_90a.f16.d256.128x80x3wg.pp.lw.ds.sl8.wgmma');
    assert.equal(dispatch(48, 'bfloat16'), 'flash-fwd.sm_90a.bf16.d64.192x128x4wg.pp.lw.ds.sl8.wgmma');
    assert.equal(
      dispatch(256, 'bfloat16', {}, 200),
      'flash-fwd.sm_90a.bf16.d256.128x80x3wg.pp.lw.ds.sl8.wgmma',
    );
    assert.equal(
      dispatch(128, 'bfloat16', {}, 104),
      'flash-fwd.sm_90a.bf16.d128.128x128x3wg.pp.lw.ds.sl8.wgmma',
    );
  });

  it('takes three consumers on 80-key tiles at H=128 from T=8192 on, but not with a bias and a mask together', () => {
    const long = (T: number, options: AttentionOptions = {}) => {
      const q = randomNormal([1, T, 1, 128], { seed: 7, dtype: 'bfloat16' });
      const kv = randomNormal([1, 8, 1, 128], { seed: 8, dtype: 'bfloat16' });
      const choice = hopperVariant(validateAttention(q, kv, kv, options), 'sm_90a', 'wgmma', null);
      return 'variant' in choice ? hopperVariantKey(choice.variant) : `mma: ${choice.reason}`;
    };
    assert.equal(long(8192), 'flash-fwd.sm_90a.bf16.d128.192x80x4wg.pp.lw.ds.sl8.wgmma');
    assert.equal(long(8191), 'flash-fwd.sm_90a.bf16.d128.128x128x3wg.pp.lw.ds.sl8.wgmma');
    const mask = randomNormal([1, 1, 8192, 8], { seed: 9 }).astype('bool');
    const bias = randomNormal([1, 1, 8192, 8], { seed: 10, dtype: 'bfloat16' });
    assert.equal(long(8192, { mask }), 'flash-fwd.sm_90a.bf16.d128.192x80x4wg.pp.lw.ds.sl8.mask.wgmma');
    assert.equal(long(8192, { bias }), 'flash-fwd.sm_90a.bf16.d128.192x80x4wg.pp.lw.ds.sl8.bias-bf16.wgmma');
    assert.equal(
      long(8192, { bias, mask }),
      'flash-fwd.sm_90a.bf16.d128.128x128x3wg.pp.lw.ds.sl8.bias-bf16.mask.wgmma',
    );
  });

  it('runs an additive bias and a boolean mask on the kernel, named in the variant', () => {
    const mask = randomNormal([1, 1, 8, 8], { seed: 4 }).astype('bool');
    const bias = randomNormal([1, 4, 8, 8], { seed: 5, dtype: 'float32' });
    const biasBf16 = randomNormal([2, 1, 1, 8], { seed: 6, dtype: 'bfloat16' });
    assert.equal(
      dispatch(128, 'bfloat16', { bias }),
      'flash-fwd.sm_90a.bf16.d128.128x128x3wg.pp.lw.ds.sl8.bias-f32.wgmma',
    );
    assert.equal(
      dispatch(64, 'bfloat16', { mask }),
      'flash-fwd.sm_90a.bf16.d64.192x128x4wg.pp.lw.ds.sl8.mask.wgmma',
    );
    assert.equal(
      dispatch(256, 'float16', { bias: biasBf16, mask, isCausal: true }),
      'flash-fwd.sm_90a.f16.d256.128x80x3wg.pp.lw.ds.sl8.bias-bf16.mask.wgmma',
    );
    const choice = hopperVariant(problem(128, 'bfloat16', { bias }), 'sm_90a', 'wgmma', null);
    assert.ok('variant' in choice);
    assert.equal(hopperDefines(choice.variant).HOPPER_BIAS, 1);
    assert.equal(hopperDefines(choice.variant).HOPPER_MASK, 0);
    assert.equal(hopperDefines(choice.variant).HOPPER_SLACK, 8);
  });

  it('leaves every other case to the mma.sync kernel, saying why', () => {
    const cases: Array<[string, string]> = [
      [dispatch(128, 'float32'), 'dtype float32'],
      [dispatch(80, 'bfloat16'), 'under 3/4'],
      [dispatch(32, 'bfloat16'), 'under 3/4'],
      [dispatch(192, 'bfloat16'), '3 boxes of 64 columns'],
      [dispatch(192, 'bfloat16', {}, 128), 'the same number of 64-column boxes'],
      [dispatch(128, 'bfloat16', {}, 64), 'the same number of 64-column boxes'],
      [dispatch(128, 'bfloat16', {}, 128, 'sm_80'), 'target sm_80'],
      [dispatch(128, 'bfloat16', {}, 128, 'sm_89'), 'target sm_89'],
    ];
    for (const [got, reason] of cases)
      assert.ok(got.startsWith('mma: ') && got.includes(reason), `${got} / ${reason}`);
    assert.deepEqual(hopperVariant(problem(128, 'bfloat16'), 'sm_90a', 'mma'), {
      reason: 'ATTNLAB_FLASH_KERNEL=mma',
    });
    // Unset: HOPPER_BY_DEFAULT decides.
    const unset = hopperVariant(problem(128, 'bfloat16'), 'sm_90a', undefined, null);
    assert.equal('variant' in unset, HOPPER_BY_DEFAULT);
  });

  it('an explicit mma.sync tile choice (ATTNLAB_FLASH_TILES) runs the mma.sync kernel, under either setting', () => {
    for (const choice of ['wgmma', undefined] as const) {
      const got = hopperVariant(problem(128, 'bfloat16'), 'sm_90a', choice, '128x64x4s2');
      const expected =
        choice === undefined && !HOPPER_BY_DEFAULT ? 'opt-in' : 'ATTNLAB_FLASH_TILES=128x64x4s2';
      assert.ok('reason' in got && got.reason.includes(expected), JSON.stringify(got));
    }
  });

  it('fits every variant in an H200 block (227 KiB) and sizes Q, two K+V stages and the barriers (q_full, 4 per stage, q_empty)', () => {
    const rows = { 64: 192, 128: 128, 256: 128 } as const;
    for (const H of [64, 128, 256]) {
      const choice = hopperVariant(problem(H, 'bfloat16'), 'sm_90a', 'wgmma', null);
      assert.ok('variant' in choice);
      const v = choice.variant;
      const bytes = hopperSharedBytes(v);
      assert.equal(hopperBlockM(v), rows[H as 64 | 128 | 256]);
      assert.equal(hopperThreads(v), 128 * (v.consumers + 1));
      assert.equal(bytes, 1024 + hopperBlockM(v) * H * 2 + 4 * v.blockN * H * 2 + 8 * 10);
      assert.ok(bytes <= 227 * 1024, `H=${H}: ${bytes} B`);
      // Each 64-column box of a K/V tile must start on a 1024-byte swizzle atom.
      assert.equal((v.blockN * 128) % 1024, 0);
    }
  });

  it('marshals HopperParams: three 128-byte tensor maps, then FlashParams, 704 bytes', () => {
    const p = problem(128, 'bfloat16', { isCausal: true });
    const flash = marshalFlashParams(
      buildFlashParams(p, { q: 1n, k: 2n, v: 3n, o: 4n, lse: 0n, bias: 0n, mask: 0n, qLens: 0n, kvLens: 0n }),
    );
    const maps = [1n, 2n, 3n].map((x) => new BigUint64Array(16).fill(x));
    const arg = marshalHopperParams(maps, flash);
    assert.equal(arg.type, 'struct');
    if (arg.type !== 'struct' || flash.type !== 'struct') return;
    assert.equal(arg.fields[16].value, 2n);
    assert.equal(arg.fields[48].value, 1n, 'FlashParams.q follows the maps');
    assert.equal(HOPPER_PARAMS_BYTES, 704);
  });

  const compiler = structCompiler();
  it('lays HopperParams out as the compiler does: maps at 0/128/256, FlashParams at 384, 704 bytes', {
    skip: 'reason' in compiler ? compiler.reason : false,
  }, () => {
    const kernel = readFileSync(join(kernelsDir(), HOPPER_KERNEL.file), 'utf8');
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
        members: ['tm_q', 'tm_k', 'tm_v', 'f'],
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
        ],
      );
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  const nvcc = spawnSync('nvcc', ['--version']).status === 0;
  it("compiles with the backend's own defines for sm_90a", {
    skip: nvcc ? false : 'nvcc not on PATH',
  }, () => {
    const choice = hopperVariant(problem(128, 'float16'), 'sm_90a', 'wgmma', null);
    assert.ok('variant' in choice);
    const spec = {
      file: HOPPER_KERNEL.file,
      kernels: [HOPPER_KERNEL.name],
      defines: hopperDefines(choice.variant),
    };
    const source = readFileSync(join(kernelsDir(), spec.file), 'utf8');
    for (const macro of new Set(source.match(/HOPPER_[A-Z0-9]+/g)))
      assert.ok(macro in spec.defines, `hopper_fwd.cu reads ${macro}, hopperDefines lacks it`);
    const dir = mkdtempSync(join(tmpdir(), 'attnlab-hopper-'));
    try {
      const defines = compileOptions(spec, 'sm_90a').filter((o) => o.startsWith('-D'));
      const args = [
        '-cubin',
        '-gencode=arch=compute_90a,code=sm_90a',
        '-std=c++17',
        '-I',
        kernelsDir(),
        ...defines,
      ];
      const result = spawnSync('nvcc', [...args, '-o', join(dir, 'k.cubin'), join(kernelsDir(), spec.file)], {
        encoding: 'utf8',
      });
      assert.equal(result.status, 0, result.stderr);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
