/**
 * The mma.sync flash kernels with score/mask modifiers, block masks, a bias and a boolean mask in
 * the backward, against nvcc without a GPU: each modifier set of test/support/modifier-cases.ts (the
 * generated source's shape) is compiled before the kernel file as NVRTC compiles it (KernelSpec.prelude:
 * the set's source, then the file's), with the backend's own defines for the variant, for sm_90a and sm_80;
 * ptxas's registers and spills per entry are printed (docs/internals/mma-forward.md and backward.md
 * record them). A modifier variant must also keep the shared memory the launcher asks for. Skips
 * without nvcc.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { validateAttention } from '../../src/api/validate.js';
import { validateBackward } from '../../src/api/validate-backward.js';
import {
  flashBackwardDefines,
  flashBackwardFile,
  flashBackwardVariant,
} from '../../src/backends/cuda/flash/sm80/backward-variant.js';
import {
  flashDefines,
  flashKernelSource,
  flashVariant,
  flashVariantSharedBytes,
} from '../../src/backends/cuda/flash/sm80/variant.js';
import { compileOptions, kernelsDir } from '../../src/backends/cuda/runtime/compile.js';
import type { AttentionOptions } from '../../src/backends/problem.js';
import { randomNormal } from '../../src/tensor/random.js';
import { Tensor } from '../../src/tensor/tensor.js';
import { elfSymbolBytes } from '../support/elf.js';
import {
  blockMaskFrom,
  compiledModifiers,
  documentCase,
  type ModifierCase,
  relativeBiasCase,
  softcapCase,
} from '../support/modifier-cases.js';

const nvcc = spawnSync('nvcc', ['--version']).status === 0;
const skip = nvcc ? false : 'nvcc not on PATH';
const scratch = mkdtempSync(join(tmpdir(), 'attnlab-flash-mods-'));
after(() => rmSync(scratch, { recursive: true, force: true }));

const shape = { B: 2, T: 256, S: 256, N: 4 };
const PRELUDE_HEADER = 'modifier_prelude.cuh';
const q = randomNormal([2, 256, 4, 128], { seed: 1, dtype: 'bfloat16' });
const kv = randomNormal([2, 256, 2, 128], { seed: 2, dtype: 'bfloat16' });

/** Compiles `file` (relative to src/kernels) behind `prelude`; returns the cubin and ptxas's lines per entry. */
function compile(
  name: string,
  file: string,
  prelude: string | null,
  defines: Record<string, number>,
  arch: string,
): { cubin: Buffer; usage: string[] } {
  const dir = mkdtempSync(join(scratch, 'v-'));
  writeFileSync(join(dir, PRELUDE_HEADER), prelude ?? '');
  const main = join(dir, 'main.cu');
  writeFileSync(main, `${prelude ? `#include "${PRELUDE_HEADER}"\n` : ''}#include "${file}"\n`);
  const options = compileOptions({ file, kernels: [], defines }, arch).filter((o) => o.startsWith('-D'));
  const cubin = join(dir, 'out.cubin');
  const args = [
    '-cubin',
    `-arch=${arch}`,
    '-std=c++17',
    '-Xptxas',
    '-v',
    '-I',
    kernelsDir(),
    '-I',
    dir,
    ...options,
  ];
  const result = spawnSync('nvcc', [...args, '-o', cubin, main], { encoding: 'utf8' });
  assert.equal(result.status, 0, `${name} ${arch}: nvcc ${options.join(' ')}:\n${result.stderr}`);
  const lines = result.stderr.split('\n');
  const usage: string[] = [];
  lines.forEach((line, i) => {
    const entry = /Compiling entry function '(\w+)'/.exec(line);
    if (!entry) return;
    const spill = /(\d+) bytes spill stores, (\d+) bytes spill loads/.exec(
      lines[i + 2] ?? lines[i + 1] ?? '',
    );
    const regs = /Used (\d+) registers/.exec(lines[i + 3] ?? lines[i + 2] ?? '');
    usage.push(
      `${entry[1]}: ${regs?.[1] ?? '?'} registers, spills ${spill?.[1] ?? '?'}/${spill?.[2] ?? '?'} B`,
    );
  });
  return { cubin: readFileSync(cubin), usage };
}

describe('flash kernels with modifiers against nvcc', { skip }, () => {
  const cases: Array<[ModifierCase, boolean, readonly string[]]> = [
    [documentCase(shape, 4, 1, true), true, ['sm_90a', 'sm_80']],
    [softcapCase(30), false, ['sm_90a']],
    [relativeBiasCase(shape, 1), false, ['sm_90a']],
  ];
  for (const [m, blocks, arches] of cases)
    for (const arch of arches) {
      it(`${m.name}${blocks ? ' (block mask)' : ''}, ${arch}: forward and backward compile; the forward states the launcher's shared memory`, () => {
        const variants = {
          modifiers: compiledModifiers(m),
          blockMask: blocks
            ? blockMaskFrom(
                { Bm: 2, Nm: 1, blockQ: 128, blockKV: 128 },
                shape,
                Tensor.zeros([2, 1, 2, 2], 'bool'),
                m.key,
              )
            : undefined,
        };
        const fv = flashVariant({ ...validateAttention(q, kv, kv), ...variants }, arch);
        const { file, sharedBytesSymbol } = flashKernelSource(fv);
        const forward = compile(m.name, file, m.source, flashDefines(fv), arch);
        const stated = elfSymbolBytes(forward.cubin, sharedBytesSymbol).readUInt32LE(0);
        assert.equal(stated, flashVariantSharedBytes(fv));
        const o = Tensor.zeros([2, 256, 4, 128], 'bfloat16');
        const bp = {
          ...validateBackward(q, kv, kv, o, Tensor.zeros([2, 256, 4], 'float32'), o, {}),
          ...variants,
        };
        // The Hopper wgmma loop on sm_90a (D=128 here), the mma.sync loop elsewhere.
        const bv = flashBackwardVariant(bp, arch);
        assert.equal(bv.kernel, arch === 'sm_90a' ? 'wgmma' : 'mma');
        const backward = compile(m.name, flashBackwardFile(bv), m.source, flashBackwardDefines(bv), arch);
        console.log(`${m.name} ${arch}\n  ${[...forward.usage, ...backward.usage].join('\n  ')}`);
      });
    }

  const DENSE: Array<[string, AttentionOptions]> = [
    ['a bf16 bias', { bias: Tensor.zeros([1, 4, 256, 256], 'bfloat16') }],
    [
      'a float32 bias and a boolean mask',
      { bias: Tensor.zeros([2, 4, 256, 256]), mask: Tensor.zeros([2, 1, 256, 256], 'bool') },
    ],
  ];
  for (const [name, options] of DENSE)
    for (const arch of ['sm_90a', 'sm_80']) {
      it(`backward with ${name}, ${arch}: compiles with the backend's defines`, () => {
        const o = Tensor.zeros([2, 256, 4, 128], 'bfloat16');
        const bp = validateBackward(q, kv, kv, o, Tensor.zeros([2, 256, 4], 'float32'), o, options);
        const bv = flashBackwardVariant(bp, arch);
        assert.equal(bv.kernel, arch === 'sm_90a' ? 'wgmma' : 'mma');
        // A contiguous mask of S = 256 takes the 16-byte row loads on the wgmma loop; the byte-an-element
        // form (a mask that does not fit them) is compiled beside it.
        const forms = bv.maskRows ? [bv, { ...bv, maskRows: false }] : [bv];
        for (const form of forms) {
          const backward = compile(name, flashBackwardFile(form), null, flashBackwardDefines(form), arch);
          console.log(
            `${name} ${arch}${form.maskRows ? ' (mask rows)' : ''}\n  ${backward.usage.join('\n  ')}`,
          );
        }
      });
    }
});
