/**
 * The CUDA flash kernels against nvcc, without a GPU: the exact -D set the backend hands NVRTC
 * compiles for sm_90a, and the compiled kernel's own statement of its shared memory per block
 * (attnlab_flash_fwd*_shared_bytes, read from the CUBIN) is what the launcher asks for. A macro the
 * kernel reads and flashDefines lacks fails every mma variant on the GPU; a launcher formula without
 * the second K/V stage lets two-stage launches write past their memory. Skips without nvcc.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import {
  flashDefines,
  flashKernelSource,
  flashVariantKey,
  flashVariantSharedBytes,
} from '../../src/backends/cuda/flash/sm80/variant.js';
import { compileOptions, kernelsDir } from '../../src/backends/cuda/runtime/compile.js';
import { elfSymbolBytes } from '../support/elf.js';
import { VARIANTS } from '../support/flash-variant-cases.js';

describe('cuda flash variants against nvcc', () => {
  const nvcc = spawnSync('nvcc', ['--version']).status === 0;
  const scratch = mkdtempSync(join(tmpdir(), 'attnlab-flash-cubin-'));
  after(() => rmSync(scratch, { recursive: true, force: true }));
  VARIANTS.forEach(([name, make], index) => {
    it(`compiles with the backend's own defines and states the shared memory the launcher asks for: ${name}`, {
      skip: nvcc ? false : 'nvcc not on PATH',
    }, () => {
      const variant = make();
      const { file, name: entry, sharedBytesSymbol } = flashKernelSource(variant);
      const cubin = join(scratch, `${index}.cubin`);
      const defines = compileOptions(
        { file, kernels: [entry], defines: flashDefines(variant) },
        'sm_90a',
      ).filter((o) => o.startsWith('-D'));
      const args = ['-cubin', '-arch=sm_90a', '-std=c++17', '-I', kernelsDir(), ...defines, '-o', cubin];
      const result = spawnSync('nvcc', [...args, join(kernelsDir(), file)], { encoding: 'utf8' });
      assert.equal(result.status, 0, `nvcc ${defines.join(' ')}:\n${result.stderr}`);
      const stated = elfSymbolBytes(readFileSync(cubin), sharedBytesSymbol).readUInt32LE(0);
      assert.equal(
        flashVariantSharedBytes(variant),
        stated,
        `${flashVariantKey(variant)}: the launcher asks for ${flashVariantSharedBytes(variant)} B, the kernel states ${stated} B`,
      );
    });
  });
});
