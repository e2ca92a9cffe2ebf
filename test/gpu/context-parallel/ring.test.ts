/**
 * Context-parallel attention on the GPU. With the loopback group (P virtual ranks on one GPU, the
 * exchange as device copies on the side stream, fenced by events): the sharded result equals one
 * call on the gathered sequence with the same backend (flash, cudnn) within FlashAttention's rule
 * against the float64 reference, for P = 2 and 4, causal in both alignments or not, GQA/MQA, padding
 * and windows. NCCL: the library loads, ncclGetVersion and ncclGetUniqueId answer, a one-rank
 * communicator made with the unique id passed BY VALUE (ncclCommInitRank) sends to itself, and a
 * one-device RingGroup.nccl runs the ring; a real ring over NCCL needs 2 GPUs and skips, saying so,
 * on fewer. Everything skips, with the reason, where there is no GPU.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { attention } from '../../../src/api/attention.js';
import {
  contextParallelAttention,
  gatherSequence,
  shardSequence,
} from '../../../src/api/context-parallel.js';
import { RingGroup } from '../../../src/api/ring-group.js';
import { NCCL_DATA_TYPE, NCCL_UNIQUE_ID_BYTES, nc } from '../../../src/backends/cuda/ffi/nccl.js';
import {
  cudaAvailable,
  deviceContext,
  deviceCount,
  getCudaContext,
  onDevice,
} from '../../../src/backends/cuda/runtime/context.js';
import { maxAbsDiff } from '../../../src/check/accuracy.js';
import { InvalidArgumentError, UnsupportedError } from '../../../src/errors.js';
import { randomNormal } from '../../../src/tensor/random.js';
import { Tensor } from '../../../src/tensor/tensor.js';
import type { RingCase } from '../../support/ring-case.js';

const cuda = cudaAvailable();
const skip = cuda.ok ? false : `no CUDA device: ${cuda.reason}`;

const H = 64;
const CASES: readonly RingCase[] = [
  { name: 'causal', B: 1, T: 512, S: 512, N: 4, K: 4, options: { isCausal: true } },
  { name: 'non-causal GQA', B: 2, T: 256, S: 256, N: 4, K: 2, options: {} },
  { name: 'causal MQA', B: 1, T: 256, S: 256, N: 4, K: 1, options: { isCausal: true } },
  {
    name: 'causal bottom_right T<S',
    B: 1,
    T: 128,
    S: 384,
    N: 2,
    K: 2,
    options: { isCausal: true, causalAlignment: 'bottom_right' },
  },
  {
    name: 'padding',
    B: 2,
    T: 256,
    S: 256,
    N: 2,
    K: 2,
    options: { isCausal: true, querySeqLengths: [256, 150], keyValueSeqLengths: [256, 120] },
  },
  { name: 'window', B: 1, T: 256, S: 256, N: 2, K: 2, options: { isCausal: true, localWindowSize: [40, 0] } },
];

function inputs(c: RingCase) {
  return {
    q: randomNormal([c.B, c.T, c.N, H], { seed: 11, dtype: 'bfloat16' }),
    k: randomNormal([c.B, c.S, c.K, H], { seed: 12, dtype: 'bfloat16' }),
    v: randomNormal([c.B, c.S, c.K, H], { seed: 13, dtype: 'bfloat16' }),
  };
}

/** Ring vs single call, both against float64: the ring's error ≤ 2 × the single call's + 2^-8. */
function check(c: RingCase, P: number, implementation: 'flash' | 'cudnn', group: RingGroup): void {
  const { q, k, v } = inputs(c);
  const reference = attention(q.astype('float64'), k.astype('float64'), v.astype('float64'), {
    ...c.options,
    implementation: 'reference',
    returnLogSumExp: true,
  });
  const [qd, kd, vd] = [q, k, v].map((t) => t.to('cuda'));
  const single = attention(qd, kd, vd, { ...c.options, implementation, returnLogSumExp: true });
  const ring = contextParallelAttention(shardSequence(qd, P), shardSequence(kd, P), shardSequence(vd, P), {
    ...(c.options as object),
    group,
    implementation,
    returnLogSumExp: true,
  });
  assert.deepEqual(ring.backends, [implementation]);
  const want = reference.output.toFloat64Array();
  const ringError = maxAbsDiff(gatherSequence(ring.outputs).toFloat64Array(), want);
  const singleError = maxAbsDiff(single.output.toFloat64Array(), want);
  const lse = gatherSequence(ring.logSumExps!.map((t) => t.reshape([c.B, c.T / P, c.N, 1])));
  const lseError = maxAbsDiff(lse.toFloat64Array(), reference.logSumExp!.toFloat64Array());
  console.log(
    `  ${implementation} ${c.name} P=${P}: ring ${ringError.toExponential(2)}, single ${singleError.toExponential(2)}, lse ${lseError.toExponential(2)}, variants ${ring.variants.length}`,
  );
  assert.ok(ringError <= 2 * singleError + 2 ** -8, `ring error ${ringError} vs single ${singleError}`);
  assert.ok(lseError <= 1e-2, `log-sum-exp error ${lseError}`);
  for (const t of [qd, kd, vd, single.output, single.logSumExp!, ...ring.outputs, ...ring.logSumExps!])
    t.dispose();
}

describe('devices and NCCL', { skip }, () => {
  it('onDevice(0) is the default context; an ordinal past the count is an InvalidArgumentError', () => {
    const count = deviceCount();
    assert.ok(count >= 1);
    assert.equal(
      onDevice(0, () => getCudaContext()),
      deviceContext(0),
    );
    assert.throws(
      () => deviceContext(count),
      (e: unknown) => e instanceof InvalidArgumentError && e.argument === 'device',
    );
  });

  it('loads NCCL: ncclGetVersion and a 128-byte ncclGetUniqueId', () => {
    const n = nc();
    console.log(`  nccl ${n.version} from ${n.path}`);
    assert.ok(n.version >= 20000, `version ${n.version}`);
    const id = n.uniqueId();
    assert.equal(id.internal.length, NCCL_UNIQUE_ID_BYTES);
    assert.ok(id.internal.some((b) => b !== 0));
    assert.equal(process.env.NCCL_NVLS_ENABLE, '0');
  });

  it('a one-rank communicator from ncclCommInitRank (id by value) sends to itself', () => {
    const n = nc();
    const comm = new BigUint64Array(1);
    n.ncclCommInitRank(comm, 1, n.uniqueId(), 0);
    const values = Array.from({ length: 1000 }, (_, i) => i - 500);
    const src = Tensor.fromArray(values, [1000], 'float32').to('cuda');
    const dst = Tensor.zeros([1000], 'float32').to('cuda');
    const { stream } = getCudaContext();
    n.ncclGroupStart();
    n.ncclSend(src.buffer.ptr, src.byteLength, NCCL_DATA_TYPE.uint8, 0, comm[0], stream);
    n.ncclRecv(dst.buffer.ptr, dst.byteLength, NCCL_DATA_TYPE.uint8, 0, comm[0], stream);
    n.ncclGroupEnd();
    assert.deepEqual([...dst.toFloat64Array()], values);
    n.ncclCommDestroy(comm[0]);
  });

  it('RingGroup.nccl(1) (ncclCommInitAll) runs the ring with P = 1', () => {
    const group = RingGroup.nccl(1);
    const c = CASES[0];
    const { q, k, v } = inputs(c);
    const [qd, kd, vd] = [q, k, v].map((t) => t.to('cuda'));
    const ring = contextParallelAttention([qd], [kd], [vd], {
      group,
      isCausal: true,
      implementation: 'flash',
    });
    const single = attention(qd, kd, vd, { isCausal: true, implementation: 'flash' });
    assert.equal(maxAbsDiff(ring.outputs[0].toFloat64Array(), single.output.toFloat64Array()), 0);
    group.destroy();
  });

  const two =
    cuda.ok && deviceCount() >= 2 ? false : `needs 2 GPUs, this machine has ${cuda.ok ? deviceCount() : 0}`;
  it('RingGroup.nccl over 2 GPUs equals one call on device 0', { skip: two }, () => {
    const group = RingGroup.nccl(2);
    const c = CASES[0];
    const { q, k, v } = inputs(c);
    const shards = [q, k, v].map((t) => shardSequence(t, 2));
    const placed = shards.map((list) => list.map((t, r) => onDevice(r, () => t.to('cuda'))));
    const ring = contextParallelAttention(placed[0], placed[1], placed[2], {
      group,
      isCausal: true,
      implementation: 'flash',
    });
    const host = ring.outputs.map((t, r) => onDevice(r, () => t.toHost()));
    const single = attention(q.to('cuda'), k.to('cuda'), v.to('cuda'), {
      isCausal: true,
      implementation: 'flash',
    });
    assert.ok(maxAbsDiff(gatherSequence(host).toFloat64Array(), single.output.toFloat64Array()) <= 2 ** -7);
    group.destroy();
  });
});

describe('contextParallelAttention on one GPU (loopback group)', { skip }, () => {
  for (const implementation of ['flash', 'cudnn'] as const)
    for (const P of [2, 4])
      for (const c of CASES) {
        if (implementation === 'cudnn' && P === 4 && c.name !== 'causal') continue; // plan builds cost seconds each
        it(`${implementation} ${c.name} P=${P}`, (t) => {
          try {
            check(c, P, implementation, RingGroup.loopback(P));
          } catch (error) {
            if (error instanceof UnsupportedError)
              return t.skip(`${implementation} refused a block: ${error.message}`);
            throw error;
          }
        });
      }
});
