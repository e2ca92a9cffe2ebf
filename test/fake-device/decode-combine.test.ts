/**
 * Where the TMA decode kernel's splits are merged (decode-tma.ts, tmaCombinesInSplit; decode.ts): by the combine
 * kernel (two launches a call), or in the split kernel where decodeTuning.combine = 'fused' (one launch, variant
 * `.fused`), against the stand-in driver of test/fake-device/cudnn-fake.c, which counts launches. The merged values
 * are the GPU tests' (test/gpu/decode/tma.test.ts).
 */
import assert from 'node:assert/strict';
import { afterEach, describe, it } from 'node:test';
import koffi from 'koffi';
import { attention } from '../../src/api/attention.js';
import { decodeTuning } from '../../src/backends/cuda/flash/decode/decode-splits.js';
import { tmaCombinesInSplit } from '../../src/backends/cuda/flash/decode/decode-tma.js';
import { allocDevice } from '../../src/backends/cuda/runtime/memory.js';
import { InvalidArgumentError } from '../../src/errors.js';
import { Tensor } from '../../src/tensor/tensor.js';
import { useFakeCudaStack } from './fake-cuda.js';

const { dir, skip } = useFakeCudaStack('attnlab-fake-decode-combine-');
const device = (shape: number[]) =>
  Tensor.fromDeviceBuffer(allocDevice(shape.reduce((a, d) => a * d, 2)), shape, 'bfloat16');

describe('TMA decode: where the splits are merged', () => {
  afterEach(() => {
    delete decodeTuning.kernel;
    delete decodeTuning.splits;
    delete decodeTuning.combine;
  });
  it('by the combine kernel unless forced into the split kernel, nowhere for one split', () => {
    assert.deepEqual(
      [1, 2, 4, 32].map((n) => tmaCombinesInSplit(n)),
      [false, false, false, false],
    );
    assert.equal(tmaCombinesInSplit(3, 'kernel'), false);
    assert.equal(tmaCombinesInSplit(2, 'fused'), true);
    assert.equal(tmaCombinesInSplit(17, 'fused'), true);
    assert.equal(tmaCombinesInSplit(1, 'fused'), false, 'one split: nothing to merge');
    assert.throws(
      () => tmaCombinesInSplit(2, 'both' as 'fused'),
      (e: unknown) => e instanceof InvalidArgumentError && /decodeTuning\.combine/.test(e.message),
    );
  });

  it('launches once a fused call, twice where the combine kernel merges', { skip }, () => {
    const launches = koffi.load(`${dir}/libcuda.so.1`).func('int fake_launch_count()');
    const q = device([2, 1, 32, 128]);
    const k = device([2, 4096, 1, 128]);
    const v = device([2, 4096, 1, 128]);
    const call = () => {
      const before = launches() as number;
      const r = attention(q, k, v, { implementation: 'flash' });
      return { variant: r.variant, launches: (launches() as number) - before };
    };
    decodeTuning.kernel = 'tma';
    const counted = (splits: number, combine?: 'fused' | 'kernel') => {
      decodeTuning.splits = splits;
      if (combine) decodeTuning.combine = combine;
      else delete decodeTuning.combine;
      return call();
    };
    // The first fused call also zeroes the counters it makes (a memset, not a launch).
    for (const splits of [2, 4, 17]) {
      const fused = counted(splits, 'fused');
      assert.equal(fused.launches, 1, `${splits} splits: ${fused.variant}`);
      assert.match(fused.variant, new RegExp(`^flash-decode-tma\\..*\\.split${splits}\\.fused$`));
    }
    for (const combine of [undefined, 'kernel'] as const) {
      const two = counted(3, combine);
      assert.equal(two.launches, 2, `3 splits, ${combine ?? 'default'}: ${two.variant}`);
      assert.doesNotMatch(two.variant, /fused/);
    }
    assert.equal(counted(1).launches, 1);
    assert.doesNotMatch(counted(1, 'fused').variant, /fused/);
  });
});
