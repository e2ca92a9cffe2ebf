/**
 * loadKernels' in-memory lookup on the stand-in device: a spec built afresh with the same fields (its defines
 * in another order too) is the module already loaded, found without a compile; a spec whose file, kernels,
 * defines, options or prelude differ — the same defines object changed in place included — is another.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { type KernelSpec, loadKernels } from '../../src/backends/cuda/runtime/compile.js';
import { useFakeCudaStack } from './fake-cuda.js';

const { skip } = useFakeCudaStack('attnlab-kernel-modules-');

describe('loadKernels finds a loaded module by its spec', { skip }, () => {
  it('the same fields find the same module; any field changed loads another', () => {
    const kernels = ['attnlab_kv_append'];
    const spec = (defines: Record<string, number>, more: Partial<KernelSpec> = {}): KernelSpec => ({
      file: 'ops/kv_append.cu',
      kernels: [...kernels],
      defines,
      ...more,
    });
    const a = loadKernels(spec({ ATTNLAB_A: 1, ATTNLAB_B: 2 }));
    assert.equal(loadKernels(spec({ ATTNLAB_A: 1, ATTNLAB_B: 2 })), a);
    assert.equal(loadKernels(spec({ ATTNLAB_B: 2, ATTNLAB_A: 1 })), a, 'the defines in another order');
    const others = [
      spec({ ATTNLAB_A: 1 }),
      spec({ ATTNLAB_A: 1, ATTNLAB_B: 3 }),
      spec({ ATTNLAB_A: 1, ATTNLAB_B: 2, ATTNLAB_C: 0 }),
      spec({ ATTNLAB_A: 1, ATTNLAB_B: 2 }, { options: ['-lineinfo'] }),
    ];
    for (const other of others) assert.notEqual(loadKernels(other), a, JSON.stringify(other));
    assert.equal(loadKernels(spec({ ATTNLAB_A: 1, ATTNLAB_B: 2 })), a, 'found again after the others');
    const defines: Record<string, number> = { ATTNLAB_D: 1 };
    const d = loadKernels(spec(defines));
    defines.ATTNLAB_D = 2;
    assert.notEqual(loadKernels(spec(defines)), d, 'the same defines object, changed in place');
  });
});
