/**
 * The flash forward's per-shape plan on the stand-in CUDA device (test/fake-device/fake-cuda.ts): the
 * bytes it launches with equal, byte for byte, the parameters the general path lays out for the same
 * call (Hopper kernel and mma.sync kernel, new addresses and tensor maps each call), one plan serves a
 * shape, and a problem with a bias takes the general path.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { validateAttention } from '../../src/api/validate.js';
import { runPlanned } from '../../src/backends/backend.js';
import { cudaFlashBackend, type FlashBackendPlan } from '../../src/backends/cuda/flash/backend.js';
import {
  buildFlashParams,
  type FlashPointers,
  marshalFlashParams,
} from '../../src/backends/cuda/flash/params.js';
import { fillPlan, flashPlan } from '../../src/backends/cuda/flash/plan.js';
import { flashVariant, flashVariantKey } from '../../src/backends/cuda/flash/sm80/variant.js';
import { hopperTensorMaps, marshalHopperParams } from '../../src/backends/cuda/flash/sm90/hopper.js';
import { hopperVariant, hopperVariantKey } from '../../src/backends/cuda/flash/sm90/hopper-variant.js';
import { targetArch } from '../../src/backends/cuda/runtime/context.js';
import { type KernelArg, packStruct } from '../../src/backends/cuda/runtime/launch.js';
import { allocDevice } from '../../src/backends/cuda/runtime/memory.js';
import { reloadConfig } from '../../src/config.js';
import { randomNormal } from '../../src/tensor/random.js';
import { Tensor } from '../../src/tensor/tensor.js';
import { useFakeCudaStack } from './fake-cuda.js';

const { skip } = useFakeCudaStack('attnlab-flash-plan-');

const bytesOf = (arg: KernelArg) => {
  assert.equal(arg.type, 'struct');
  return packStruct(arg.type === 'struct' ? arg.fields : []).bytes;
};

function pointers(base: bigint): FlashPointers {
  return {
    q: base,
    k: base + 0x10000n,
    v: base + 0x20000n,
    o: base + 0x30000n,
    lse: base + 0x40000n,
    bias: 0n,
    mask: 0n,
    qLens: 0n,
    kvLens: 0n,
  };
}

describe('the flash plan', { skip }, () => {
  const q = randomNormal([4, 128, 8, 64], { seed: 1, dtype: 'bfloat16' }).to('cuda');
  const options = { isCausal: true, returnLogSumExp: true };

  it('launches the bytes the general path lays out, on the Hopper kernel', () => {
    const p = validateAttention(q, q, q, options);
    const plan = flashPlan(p)!;
    const found = hopperVariant(p, targetArch());
    assert.ok('variant' in found, 'the stand-in is sm_90: the Hopper kernel');
    assert.equal(plan.key, hopperVariantKey(found.variant));
    assert.equal(flashPlan(validateAttention(q, q, q, options)), plan, 'one plan a shape');
    for (const base of [0x7000_0000n, 0x9000_0000n, 0x7000_0000n]) {
      const ptrs = pointers(base);
      fillPlan(plan, p, ptrs, 0n);
      const maps = hopperTensorMaps(p, found.variant, ptrs.q, ptrs.k, ptrs.v);
      const general = bytesOf(marshalHopperParams(maps, marshalFlashParams(buildFlashParams(p, ptrs)), 0n));
      assert.deepEqual(plan.bytes, general, `addresses from ${base.toString(16)}`);
    }
  });

  it('launches the bytes the general path lays out, on the mma.sync kernel; a config change drops the plans', () => {
    process.env.ATTNLAB_FLASH_KERNEL = 'mma';
    reloadConfig();
    try {
      const p = validateAttention(q, q, q, { ...options, localWindowSize: [32, 0] });
      const plan = flashPlan(p)!;
      assert.equal(plan.key, flashVariantKey(flashVariant(p, targetArch())));
      assert.equal(plan.hopper, null);
      const ptrs = pointers(0x5000_0000n);
      fillPlan(plan, p, ptrs, 0n);
      assert.deepEqual(plan.bytes, bytesOf(marshalFlashParams(buildFlashParams(p, ptrs))));
    } finally {
      delete process.env.ATTNLAB_FLASH_KERNEL;
      reloadConfig();
    }
    const p = validateAttention(q, q, q, options);
    assert.notEqual(flashPlan(p)?.hopper, null, 'back on the Hopper kernel');
  });

  it('leaves a problem with a bias to the general path', () => {
    const bias = randomNormal([1, 1, 128, 128], { seed: 2, dtype: 'bfloat16' }).to('cuda');
    assert.equal(flashPlan(validateAttention(q, q, q, { bias })), null);
  });
});

describe("the flash backend's plan of a call", { skip }, () => {
  const q = randomNormal([4, 128, 8, 64], { seed: 3, dtype: 'bfloat16' }).to('cuda');

  it('reports the kernel family and variant it runs, and takes the kept plan of a shape that ran', () => {
    const p = validateAttention(q, q, q, { isCausal: true });
    const first = cudaFlashBackend.plan(p);
    assert.ok(first.ok && first.plan.family === 'wgmma', JSON.stringify(first));
    assert.equal(cudaFlashBackend.family?.(p), 'wgmma', 'family() answers as the plan does');
    const r = runPlanned(cudaFlashBackend, first.plan, p);
    assert.equal(r.variant, first.plan.key, 'the run reports the variant its plan named');
    assert.equal(first.plan.kept, null, 'the first call of a shape has no kept plan yet');
    r.output.dispose();
    const again = cudaFlashBackend.plan(validateAttention(q, q, q, { isCausal: true }));
    assert.ok(again.ok && again.plan.family !== 'decode');
    assert.equal(again.plan.kept, flashPlan(p), 'the second call of the shape plans from the kept plan');
  });

  it('refuses a misaligned input even where the shape has a kept plan', () => {
    const p = validateAttention(q, q, q, { isCausal: true });
    runPlanned(
      cudaFlashBackend,
      (cudaFlashBackend.plan(p) as { plan: FlashBackendPlan }).plan,
      p,
    ).output.dispose();
    assert.ok(flashPlan(p), 'kept');
    // A buffer one element in: 2 bytes off the 16-byte alignment the kernels copy with.
    const block = allocDevice((4 * 128 * 8 * 64 + 8) * 2);
    const view = {
      ptr: block.ptr + 2n,
      bytes: block.bytes - 2,
      released: false,
      release: () => block.release(),
    };
    const shifted = Tensor.fromDeviceBuffer(view, [4, 128, 8, 64], 'bfloat16');
    const refused = cudaFlashBackend.plan(validateAttention(shifted, q, q, { isCausal: true }));
    assert.ok(!refused.ok && /query is not 16-byte aligned/.test(refused.reason), JSON.stringify(refused));
    block.release();
  });

  it('plans a B=1 decode step on the decode kernels', () => {
    const d = randomNormal([1, 1, 32, 128], { seed: 5, dtype: 'bfloat16' }).to('cuda');
    const kv = randomNormal([1, 4096, 8, 128], { seed: 6, dtype: 'bfloat16' }).to('cuda');
    const found = cudaFlashBackend.plan(validateAttention(d, kv, kv));
    assert.ok(found.ok && found.plan.family === 'decode', JSON.stringify(found));
  });
});
