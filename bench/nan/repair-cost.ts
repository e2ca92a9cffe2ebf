/**
 * What issue 12 §1 costs at B=2, T=S=8192, N=16, H=128, bf16: the NaN repair kernel alone
 * (src/backends/cuda/flash/nan-repair.ts) on a NaN-free output, against the whole cudnn call that includes
 * it (causal: the repair runs), and the flash kernel's TFLOP/s (its epilogue now checks for NaN),
 * causal and not, for comparison with PyTorch's FlashAttention-2 in the same run (torch-fa2.py).
 * Each series runs 300 ms back to back before it is timed (the H200 settles under its power cap).
 * Usage on the GPU: node --import tsx bench/nan/repair-cost.ts
 */
import { attention } from '../../src/api/attention.js';
import { validateAttention } from '../../src/api/validate.js';
import { synchronize } from '../../src/backends/cuda/context.js';
import { repairMaskedNaN } from '../../src/backends/cuda/flash/nan-repair.js';
import { timeOnStream } from '../../src/bench/cuda-timer.js';
import { randomNormal } from '../../src/tensor/random.js';

const [B, T, N, H] = [2, 8192, 16, 128];
// One random tensor serves as Q, K and V: host-side generation of three would take most of the run.
const x = randomNormal([B, T, N, H], { seed: 1, dtype: 'bfloat16' }).to('cuda');
const settled = (fn: () => void) => {
  const end = performance.now() + 300;
  while (performance.now() < end) {
    for (let i = 0; i < 20; i++) fn();
    synchronize();
  }
  return timeOnStream(fn, { iterations: 30, warmup: 2 }).median;
};
const tflops = (ms: number, causal: boolean) =>
  (4 * B * N * T * T * H) / (causal ? 2 : 1) / (ms * 1e-3) / 1e12;
const cudnn = { isCausal: true, implementation: 'cudnn' as const };
const out = attention(x, x, x, cudnn).output;
const problem = validateAttention(x, x, x, cudnn);
const cudnnMs = settled(() => attention(x, x, x, cudnn).output.dispose());
const repairMs = settled(() =>
  repairMaskedNaN(problem, { output: out.buffer.ptr, queryLengths: 0n, keyValueLengths: 0n }),
);
const flash = [false, true].map((isCausal) => {
  const ms = settled(() => attention(x, x, x, { isCausal, implementation: 'flash' }).output.dispose());
  return { isCausal, ms, tflops: tflops(ms, isCausal) };
});
console.log(
  JSON.stringify({
    shape: { B, T, S: T, N, H, dtype: 'bfloat16' },
    cudnnCausal: { ms: cudnnMs, tflops: tflops(cudnnMs, true) },
    repairMs,
    repairShareOfCudnnCausal: repairMs / cudnnMs,
    flash,
  }),
);
