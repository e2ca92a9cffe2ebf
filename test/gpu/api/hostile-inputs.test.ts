/**
 * Hostile inputs on the CUDA path: a revoked Proxy as options or tensor, a scale past float32's range on every
 * CUDA backend, a tensor over a detached buffer moved to the GPU, and an explicit scale inside the range
 * matching the CPU reference. Each is a typed error before any kernel, or a result that matches the CPU reference.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { cudaAvailable } from '../../../src/backends/cuda/runtime/context.js';
import {
  attention,
  type Implementation,
  InvalidArgumentError,
  randomNormal,
  Tensor,
} from '../../../src/index.js';

const cuda = cudaAvailable();
const skip = cuda.ok ? false : `no CUDA device: ${cuda.reason}`;

const revoked = <T extends object>(target: T): T => {
  const { proxy, revoke } = Proxy.revocable(target, {});
  revoke();
  return proxy;
};

describe('hostile inputs on CUDA tensors', { skip }, () => {
  const [B, T, N, H] = [1, 64, 4, 64];
  const host = [1, 2, 3].map((seed) => randomNormal([B, T, N, H], { seed, dtype: 'bfloat16' }));
  const [q, k, v] = host.map((t) => t.to('cuda'));

  for (const implementation of ['naive', 'flash', 'cudnn'] as Implementation[]) {
    it(`${implementation}: a scale past float32's range is refused before any kernel`, () => {
      for (const scale of [1e308, -1e39]) {
        assert.throws(
          () => attention(q, k, v, { implementation, scale }),
          (e) => e instanceof InvalidArgumentError && e.argument === 'scale',
        );
      }
    });
    it(`${implementation}: an explicit scale 4× the default runs and matches the CPU reference`, () => {
      const scale = 4 / Math.sqrt(H);
      const gpu = attention(q, k, v, { implementation, scale }).output.toFloat64Array();
      const cpu = attention(host[0], host[1], host[2], {
        implementation: 'reference',
        scale,
      }).output.toFloat64Array();
      let worst = 0;
      for (let i = 0; i < cpu.length; i++) worst = Math.max(worst, Math.abs(gpu[i] - cpu[i]));
      assert.ok(gpu.every(Number.isFinite), 'finite');
      assert.ok(worst < 0.05, `max error ${worst}`);
    });
  }

  it('a revoked Proxy as options or as a CUDA tensor is refused by name', () => {
    assert.throws(
      () => attention(q, k, v, revoked({})),
      (e) => e instanceof InvalidArgumentError && e.argument === 'options',
    );
    assert.throws(
      () => attention(q, revoked(k), v),
      (e) => e instanceof InvalidArgumentError && e.argument === 'key' && /revoked Proxy/.test(e.message),
    );
  });

  it('a host tensor whose buffer was detached is refused when moved to the GPU', () => {
    const data = new Uint16Array(B * T * N * H);
    const t = Tensor.fromRaw(data, [B, T, N, H], 'bfloat16');
    structuredClone(data.buffer, { transfer: [data.buffer] });
    assert.throws(
      () => t.to('cuda'),
      (e) => e instanceof InvalidArgumentError && /detached/.test(e.message),
    );
  });
});
