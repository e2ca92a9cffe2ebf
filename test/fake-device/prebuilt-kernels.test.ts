/**
 * Shipped kernels without a GPU: the list covers the plain forward variants every target takes at the
 * benchmarked and codelab shapes; on the stand-in CUDA device (test/fake-device/fake-cuda.ts) the loader
 * takes a shipped binary filed under the spec's key with no NVRTC compile (ATTNLAB_ASSERT_NO_COMPILE=1
 * proves it), keeps it in memory, and falls back to NVRTC for a spec the package does not ship.
 */
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after, describe, it } from 'node:test';
import { gzipSync } from 'node:zlib';
import { nvccArguments, shippedKey } from '../../scripts/prebuild-kernels.js';
import { validateAttention } from '../../src/api/validate.js';
import { SHIPPED_ARCHS, shippedFlashSpecs } from '../../src/backends/cuda/flash/shipped.js';
import { flashDefines, flashKernelSource, flashVariant } from '../../src/backends/cuda/flash/sm80/variant.js';
import {
  HOPPER_KERNEL,
  hopperDefines,
  hopperVariant,
} from '../../src/backends/cuda/flash/sm90/hopper-variant.js';
import { compileHistory, loadKernels } from '../../src/backends/cuda/runtime/compile.js';
import { prebuiltPath, shippable, usePrebuiltDir } from '../../src/backends/cuda/runtime/prebuilt.js';
import { reloadConfig } from '../../src/config.js';
import { CompileError } from '../../src/errors.js';
import { allocRaw } from '../../src/tensor/dtype.js';
import { Tensor } from '../../src/tensor/tensor.js';
import { useFakeCudaStack } from './fake-cuda.js';

const { skip } = useFakeCudaStack('attnlab-prebuilt-');
const shipped = mkdtempSync(join(tmpdir(), 'attnlab-shipped-'));
usePrebuiltDir(shipped);
after(() => usePrebuiltDir(null));

/** The spec the flash backend loads for a plain forward problem of these sizes on `arch`. */
function specOf(B: number, T: number, N: number, H: number, causal: boolean, arch: string) {
  // Zeros: the variant depends on sizes only, and drawing 134M normals would take a minute.
  const q = Tensor.fromRaw(allocRaw('bfloat16', B * T * N * H), [B, T, N, H], 'bfloat16');
  const p = validateAttention(q, q, q, { isCausal: causal });
  const hopper = hopperVariant(p, arch, null, null);
  if ('variant' in hopper)
    return {
      file: HOPPER_KERNEL.file,
      kernels: [HOPPER_KERNEL.name],
      defines: hopperDefines(hopper.variant),
    };
  const v = flashVariant(p, arch);
  const { file, name } = flashKernelSource(v);
  return { file, kernels: [name], defines: flashDefines(v) };
}

describe('the shipped kernel list', () => {
  it('holds the plain forward variant of the codelab and benchmark shapes on every target', () => {
    for (const arch of SHIPPED_ARCHS) {
      const list = shippedFlashSpecs(arch).map((s) => JSON.stringify(s));
      assert.ok(list.length >= 6, `${arch}: ${list.length}`);
      for (const [B, T, N, H, causal] of [
        [4, 128, 8, 64, true],
        [4, 8192, 16, 128, false],
        [4, 8192, 16, 64, true],
        [4, 8192, 16, 256, true],
        [8, 4096, 16, 128, true],
      ] as const) {
        assert.ok(
          list.includes(JSON.stringify(specOf(B, T, N, H, causal, arch))),
          `${arch} B=${B} T=${T} H=${H}`,
        );
      }
    }
  });

  it('names only extern "C" kernels, which need no lowered names', () => {
    for (const arch of SHIPPED_ARCHS)
      for (const spec of shippedFlashSpecs(arch)) assert.ok(shippable(spec.kernels));
    assert.equal(shippable(['attnlab_softmax<float, true>']), false);
  });

  it('builds each with the flags the nvcc test uses, plus the variant macros', () => {
    const [spec] = shippedFlashSpecs('sm_90a');
    const args = nvccArguments(spec, 'sm_90a', 'out.cubin');
    assert.deepEqual(args.slice(0, 3), ['-cubin', '-arch=sm_90a', '-std=c++17']);
    for (const [name, value] of Object.entries(spec.defines ?? {}))
      assert.ok(args.includes(`-D${name}=${value}`));
  });
});

describe('the loader on a stand-in GPU', { skip }, () => {
  it('takes a shipped binary by the spec key, compiles nothing, and keeps it in memory', () => {
    process.env.ATTNLAB_ASSERT_NO_COMPILE = '1';
    reloadConfig();
    try {
      const spec = specOf(4, 128, 8, 64, true, 'sm_90a');
      const path = prebuiltPath('sm_90a', shippedKey(spec, 'sm_90a'), shipped);
      mkdirSync(dirname(path), { recursive: true });
      writeFileSync(path, gzipSync(Buffer.from('a stand-in cubin')));
      const module = loadKernels(spec);
      assert.equal(compileHistory().at(-1)?.source, 'prebuilt');
      assert.ok(module.functions.get(spec.kernels[0]));
      loadKernels(spec);
      assert.equal(compileHistory().at(-1)?.source, 'memory');
      // Another variant (other tiles) is not shipped here: with compiling forbidden, it fails as a compile.
      const other = { ...spec, defines: { ...spec.defines, HOPPER_RESCALE_SLACK: 4 } };
      assert.throws(() => loadKernels(other), CompileError);
    } finally {
      delete process.env.ATTNLAB_ASSERT_NO_COMPILE;
      reloadConfig();
    }
  });
});
