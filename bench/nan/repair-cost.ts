/**
 * What the NaN repair (src/backends/cuda/nan-repair.ts) costs the cudnn backend where it runs
 * (causal, window, padding, bias, mask): the repair kernel alone on a NaN-free output, against the
 * whole cudnn call that includes it, at B=2, T=S=8192, N=16, H=128, bf16, causal (issue 12 §1).
 * Usage on the GPU: node --import tsx bench/nan/repair-cost.ts
 */
import { attention } from '../../src/api/attention.js';
import { validateAttention } from '../../src/api/validate.js';
import { repairMaskedNaN } from '../../src/backends/cuda/nan-repair.js';
import { timeOnStream } from '../../src/bench/cuda-timer.js';
import { randomNormal } from '../../src/tensor/random.js';

const [B, T, N, H] = [2, 8192, 16, 128]; // B=2: host-side random inputs for B=4 take ~10 s
const make = (seed: number) => randomNormal([B, T, N, H], { seed, dtype: 'bfloat16' }).to('cuda');
const [q, k, v] = [make(1), make(2), make(3)];
const options = { isCausal: true, implementation: 'cudnn' as const };
const out = attention(q, k, v, options).output;
const problem = validateAttention(q, k, v, options);
const call = timeOnStream(() => attention(q, k, v, options).output.dispose(), { iterations: 30, warmup: 5 });
const repair = timeOnStream(
  () => repairMaskedNaN(problem, { output: out.buffer.ptr, queryLengths: 0n, keyValueLengths: 0n }),
  { iterations: 30, warmup: 5 },
);
const flops = (4 * B * N * T * T * H) / 2;
console.log(
  JSON.stringify({
    shape: { B, T, S: T, N, H, causal: true, dtype: 'bfloat16' },
    cudnnCallMs: call.median,
    cudnnTflops: flops / (call.median * 1e-3) / 1e12,
    repairMs: repair.median,
    repairShareOfCall: repair.median / call.median,
  }),
);
