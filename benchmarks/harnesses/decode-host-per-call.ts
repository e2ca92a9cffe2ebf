/**
 * Host time of a whole flash decode call (validation, dispatch, variant choice, maps, both launches), per
 * split kernel, with no GPU needed: against the stand-in driver of the CPU tests (test/fake-device/cudnn-fake.c
 * built as libcuda/libcudnn, te-fake-nvrtc.c as libnvrtc) the launches cost nothing and what is left is
 * attnlab's own host path. Measured so (B=1 S=2k K=1: row-tile kernel 9–13 µs a call, the
 * TMA kernel 15–18 through tsx, 10–13 compiled) and trimmed the TMA path's ~6 µs excess to ~2–3; runs on a
 * shared machine vary by a third, so compare kernels within one run.
 *   cc -shared -fPIC -O1 -o /tmp/fake/libcuda.so.1 test/fake-device/cudnn-fake.c -lm   (and libcudnn.so.9)
 *   cc -shared -fPIC -O1 -o /tmp/fake/libnvrtc.so.13 test/fake-device/te-fake-nvrtc.c -lm
 *   ATTNLAB_LIBCUDA=/tmp/fake/libcuda.so.1 ATTNLAB_CUDNN=/tmp/fake/libcudnn.so.9 \
 *   ATTNLAB_NVRTC=/tmp/fake/libnvrtc.so.13 ATTNLAB_KERNEL_CACHE=0 \
 *     node --import tsx benchmarks/harnesses/decode-host-per-call.ts [B:S:K:blockSize …]   (blockSize 0: dense)
 * On a GPU it times the same calls there (host time only: calls are enqueued, not waited for).
 */
import { attention } from '../../src/api/attention.js';
import { decodeTuning } from '../../src/backends/cuda/flash/decode/decode-splits.js';
import { getCudaContext } from '../../src/backends/cuda/runtime/context.js';
import type { AttentionOptions } from '../../src/backends/problem.js';
import { deviceRandom, pageTable } from './decode-timing.js';

const shapes = process.argv.slice(2).length
  ? process.argv.slice(2)
  : ['1:2048:1:0', '1:2048:1:16', '1:32768:1:64'];
const [N, H, CALLS] = [32, 128, 10_000];
getCudaContext();
for (const shape of shapes) {
  const [B, S, K, blockSize] = shape.split(':').map(Number);
  const q = deviceRandom([B, 1, N, H], 1);
  const blocks = blockSize ? B * Math.ceil(S / blockSize) : 0;
  const k = deviceRandom(blockSize ? [blocks, blockSize, K, H] : [B, S, K, H], 2);
  const v = deviceRandom(blockSize ? [blocks, blockSize, K, H] : [B, S, K, H], 3);
  const options: AttentionOptions = blockSize
    ? {
        implementation: 'flash',
        blockTable: pageTable(B, S, blockSize),
        keyValueSeqLengths: Array(B).fill(S),
      }
    : { implementation: 'flash' };
  for (const kernel of ['rows', 'heads', 'tma'] as const) {
    decodeTuning.kernel = kernel;
    let variant = '';
    for (let i = 0; i < CALLS / 5; i++) attention(q, k, v, options).output.dispose();
    const started = performance.now();
    for (let i = 0; i < CALLS; i++) {
      const r = attention(q, k, v, options);
      variant = r.variant;
      r.output.dispose();
    }
    const us = ((performance.now() - started) * 1000) / CALLS;
    console.log(`${shape.padEnd(14)} ${kernel.padEnd(6)} ${us.toFixed(1).padStart(6)} µs a call  ${variant}`);
  }
  delete decodeTuning.kernel;
  for (const t of [q, k, v]) t.dispose();
}
