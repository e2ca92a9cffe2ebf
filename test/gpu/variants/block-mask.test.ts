/**
 * createBlockMask on the GPU (src/kernels/variants/block_mask.cu, the mask modifier compiled in):
 * the kinds equal the CPU's classification of the same mask, for masks reading int32 tensors on the
 * device, b, h and neither, at block sizes that do and do not divide T and S. Skips, with the reason,
 * where there is no GPU.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { createBlockMask } from '../../../src/api/block-mask.js';
import { cudaAvailable } from '../../../src/backends/cuda/runtime/context.js';
import { Tensor } from '../../../src/tensor/tensor.js';
import {
  and,
  causal,
  documentMask,
  or,
  prefixLm,
  sinks,
  slidingWindow,
} from '../../../src/variants/library.js';
import { type MaskMod, maskMod } from '../../../src/variants/modifiers.js';

const cuda = cudaAvailable();
const skip = cuda.ok ? false : `no CUDA device: ${cuda.reason}`;

describe('createBlockMask on the GPU equals the CPU classification', { skip }, () => {
  const [B, N, T, S] = [3, 4, 1000, 1200];
  const ids = Array.from({ length: B * S }, (_, i) => Math.floor((i % S) / (97 + 31 * Math.floor(i / S))));
  const host = (m: (docIds: Tensor, lengths: Tensor) => MaskMod) =>
    m(Tensor.fromArray(ids, [B, S], 'int32'), Tensor.fromArray([10, 300, 999], [B], 'int32'));
  const cases: [string, (docIds: Tensor, lengths: Tensor) => MaskMod][] = [
    ['causal', () => causal()],
    ['documents and causal', (d) => and(documentMask(d), causal())],
    ['prefixLm', (_d, l) => prefixLm(l)],
    ['window or sinks', () => or(slidingWindow(200, 0), sinks(4))],
    ['per head', () => maskMod('(kv / 64 + h) % 3 != 0 || q < 100')],
  ];
  for (const [name, make] of cases) {
    it(name, () => {
      for (const [blockQ, blockKV] of [
        [128, 128],
        [64, 176],
        [100, 77],
      ]) {
        const onCpu = createBlockMask(host(make), { B, N, T, S, blockQ, blockKV });
        const cudaIds = Tensor.fromArray(ids, [B, S], 'int32').to('cuda');
        const cudaLengths = Tensor.fromArray([10, 300, 999], [B], 'int32').to('cuda');
        const onGpu = createBlockMask(make(cudaIds, cudaLengths), {
          B,
          N,
          T,
          S,
          blockQ,
          blockKV,
          device: 'cuda',
        });
        assert.equal(onGpu.device, 'cuda');
        assert.deepEqual(onGpu.kinds.shape, onCpu.kinds.shape);
        // The same function; the key's tail names the captured tensor objects, which differ by design.
        assert.equal(onGpu.maskKey.split('-')[0], onCpu.maskKey.split('-')[0]);
        assert.deepEqual(
          Array.from(onGpu.kinds.toHost().data as Uint8Array),
          Array.from(onCpu.kinds.toHost().data as Uint8Array),
          `${name} ${blockQ}×${blockKV}`,
        );
      }
    });
  }
});
